// Strided box copies (exec/box_copy.h): direct strided-to-strided copies, packing and unpacking
// a flat range of a box, contiguous_offset, element sizes other than 4, and the refusal of a
// box outside its storage; every destination element checked against its global index.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "exec/box_copy.h"
#include "tests/exec/box_cases.h"

namespace dynatrain::exec {
namespace {
using test::box;

// Storage of `outer` where each element holds its row-major index in `global` (a big box).
std::vector<std::uint32_t> storage(const vps::Box& outer, const vps::Box& global) {
  std::vector<std::uint32_t> v(static_cast<std::size_t>(outer.numel()));
  for (std::int64_t i = 0; i < outer.numel(); ++i)
    v[static_cast<std::size_t>(i)] = static_cast<std::uint32_t>(global.linear_index(outer.coord_at(i)));
  return v;
}

TEST(BoxCopy, RandomBoxesAllRanksPackUnpackAndDirect) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int nd = 1 + trial % 4;
    const test::BoxCase bc = test::random_box_case(rng, nd, 6);
    const vps::Box &global = bc.global, &s_outer = bc.src, &d_outer = bc.dst, &q = bc.q;
    if (q.empty()) continue;
    const auto src = storage(s_outer, global);
    // Direct strided -> strided.
    std::vector<std::uint32_t> dst(static_cast<std::size_t>(d_outer.numel()), 0xFFFFFFFF);
    copy_box(q, reinterpret_cast<const std::byte*>(src.data()), s_outer, reinterpret_cast<std::byte*>(dst.data()),
             d_outer, 4);
    for (std::int64_t i = 0; i < d_outer.numel(); ++i) {
      const auto c = d_outer.coord_at(i);
      const bool in = test::holds(q, c);
      ASSERT_EQ(dst[i], in ? static_cast<std::uint32_t>(global.linear_index(c)) : 0xFFFFFFFF) << trial;
    }
    // Pack a random flat range of q, unpack it into a fresh destination.
    const std::int64_t n = q.numel();
    std::int64_t a = rng() % n, z = rng() % n;
    if (a > z) std::swap(a, z);
    ++z;
    std::vector<std::uint32_t> packed(static_cast<std::size_t>(z - a));
    ASSERT_EQ(pack_range(q, a, z, reinterpret_cast<const std::byte*>(src.data()), s_outer,
                         reinterpret_cast<std::byte*>(packed.data()), 4),
              static_cast<std::size_t>(z - a) * 4);
    for (std::int64_t i = a; i < z; ++i)
      ASSERT_EQ(packed[i - a], static_cast<std::uint32_t>(global.linear_index(q.coord_at(i))));
    std::vector<std::uint32_t> back(static_cast<std::size_t>(d_outer.numel()), 0xFFFFFFFF);
    unpack_range(q, a, z, reinterpret_cast<const std::byte*>(packed.data()), reinterpret_cast<std::byte*>(back.data()),
                 d_outer, 4);
    for (std::int64_t i = a; i < z; ++i) ASSERT_EQ(back[d_outer.linear_index(q.coord_at(i))], packed[i - a]);
    // contiguous_offset agrees with a brute-force check.
    const std::int64_t off = contiguous_offset(q, a, z, s_outer);
    bool contiguous = true;
    for (std::int64_t i = a + 1; i < z; ++i)
      contiguous &= s_outer.linear_index(q.coord_at(i)) == s_outer.linear_index(q.coord_at(i - 1)) + 1;
    EXPECT_EQ(off >= 0, contiguous);
    if (off >= 0) {
      EXPECT_EQ(off, s_outer.linear_index(q.coord_at(a)));
    }
  }
}

TEST(BoxCopy, TwoByteElementsAndRejectsOutside) {
  const vps::Box outer = box({0, 0}, {4, 6}), q = box({1, 2}, {3, 5});
  std::vector<std::uint16_t> src(24);
  std::iota(src.begin(), src.end(), 0);
  std::vector<std::uint16_t> out(6);
  copy_box(q, reinterpret_cast<const std::byte*>(src.data()), outer, reinterpret_cast<std::byte*>(out.data()), q, 2);
  EXPECT_EQ(out, (std::vector<std::uint16_t>{8, 9, 10, 14, 15, 16}));
  EXPECT_THROW(copy_box(box({0, 0}, {5, 1}), reinterpret_cast<const std::byte*>(src.data()), outer,
                        reinterpret_cast<std::byte*>(out.data()), box({0, 0}, {5, 1}), 2),
               InvariantError);
}

}  // namespace
}  // namespace dynatrain::exec
