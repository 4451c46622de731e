#include <gtest/gtest.h>

#include <random>

#include "vps/box.h"

namespace dynatrain::vps {
namespace {

TEST(Box, IntersectAndNumel) {
  Box a = Box::of_shape({4, 6});
  Box b = a;
  b.lo = {2, 3};
  b.hi = {8, 9};
  Box i = intersect(a, b);
  EXPECT_EQ(i.lo[0], 2);
  EXPECT_EQ(i.hi[1], 6);
  EXPECT_EQ(i.numel(), 2 * 3);
  Box far = a;
  far.lo = {4, 0};
  far.hi = {5, 6};
  EXPECT_TRUE(intersect(a, far).empty());
}

TEST(Box, LinearIndexRoundTrip) {
  Box b;
  b.ndim = 3;
  b.lo = {1, 2, 3};
  b.hi = {3, 5, 7};
  for (std::int64_t i = 0; i < b.numel(); ++i) EXPECT_EQ(b.linear_index(b.coord_at(i)), i);
}

// Every flat range decomposes into at most 2*ndim-1 boxes that, in order, enumerate exactly the
// elements [begin, end) of the outer box's row-major order.
TEST(Box, FlatRangeDecompositionIsExactAndSmall) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int ndim = 1 + trial % kMaxDims;
    std::vector<std::int64_t> shape;
    for (int d = 0; d < ndim; ++d) shape.push_back(1 + rng() % 5);
    Box outer = Box::of_shape(shape);
    for (int d = 0; d < ndim; ++d) {  // shift so that lo != 0
      outer.lo[d] += 3;
      outer.hi[d] += 3;
    }
    const std::int64_t n = outer.numel();
    std::int64_t begin = rng() % (n + 1), end = rng() % (n + 1);
    if (begin > end) std::swap(begin, end);
    std::vector<Box> boxes;
    flat_range_boxes(outer, begin, end, boxes);
    ASSERT_LE(static_cast<int>(boxes.size()), 2 * ndim - 1);
    std::int64_t next = begin;
    for (const Box& b : boxes) {
      ASSERT_FALSE(b.empty());
      ASSERT_TRUE(outer.contains(b));
      for (std::int64_t i = 0; i < b.numel(); ++i)
        ASSERT_EQ(outer.linear_index(b.coord_at(i)), next++) << outer.str() << " " << b.str();
    }
    ASSERT_EQ(next, end);
  }
}

}  // namespace
}  // namespace dynatrain::vps
