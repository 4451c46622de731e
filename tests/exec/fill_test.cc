// The content oracle the engine tests check against (testing/fill.h): a filled buffer verifies,
// one flipped byte is found at its tensor and global index, and kinds and tensors differ.
#include <gtest/gtest.h>

#include <vector>

#include "testing/fill.h"
#include "vps/layout.h"

namespace dynatrain::exec {
using namespace dynatrain::testing;
namespace {

TEST(Fill, VerifyFindsTheFirstWrongElement) {
  const vps::ModelSpec m = vps::model_from_name("tiny-dense");
  vps::LayoutOptions lo;
  lo.bucket_elems = 1000;
  const vps::Layout layout(m, vps::ParallelConfig::parse("tp=2,dp=2,zero=1"), lo);
  const auto rl = layout.rank_layout(3);
  for (const auto& buf : rl.buffers) {
    const int e = lo.elem_bytes[static_cast<int>(buf.kind)];
    std::vector<std::byte> data(static_cast<std::size_t>(buf.numel * e));
    fill_buffer(layout.tensors(), buf, e, data.data());
    ASSERT_FALSE(verify_buffer(layout.tensors(), buf, e, data.data()));
    if (buf.segments.empty()) continue;
    const auto& seg = buf.segments.back();
    data[static_cast<std::size_t>((seg.offset + seg.box.numel() - 1) * e)] ^= std::byte{1};
    const auto bad = verify_buffer(layout.tensors(), buf, e, data.data());
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->tensor, seg.tensor);
    const auto& shape = layout.tensors()[seg.tensor].shape;
    vps::Box full = vps::Box::of_shape(shape);
    vps::Coord last = seg.box.coord_at(seg.box.numel() - 1);
    EXPECT_EQ(bad->global_index, full.linear_index(last));
  }
  // Distinct kinds and tensors give distinct words at the same index.
  EXPECT_NE(fill_word(0, vps::StateKind::kParam, 5), fill_word(0, vps::StateKind::kGrad, 5));
  EXPECT_NE(fill_word(0, vps::StateKind::kParam, 5), fill_word(1, vps::StateKind::kParam, 5));
}

}  // namespace
}  // namespace dynatrain::exec
