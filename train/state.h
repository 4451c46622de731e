// Training state in the Virtual Parameter Space: one flat fp32 arena per state kind, laid out
// by vps::Layout, plus the functions that fill, gather and scatter it in VPS coordinates.
//
// Arena contract (shared with exec/ and plan/, which never see torch):
//   arena[kind] is every LocalBuffer of that kind of RankLayout laid end to end at
//   LocalBuffer::arena_offset; a buffer's Segment s holds box s.box of tensor s.tensor dense
//   row-major at s.offset. Padding elements (bucket padding, vocab padding rows) belong to no
//   segment and stay zero. Local torch parameters are views into arena[param] (trainer.cc).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "comm/transport.h"
#include "vps/layout.h"

namespace dynatrain::train {

// fp32 everywhere on CPU; the layout options every trainer layout uses.
vps::LayoutOptions trainer_layout_options(std::int64_t bucket_elems,
                                          std::vector<vps::StateKind> kinds = {
                                              vps::StateKind::kParam, vps::StateKind::kGrad,
                                              vps::StateKind::kMaster, vps::StateKind::kExpAvg,
                                              vps::StateKind::kExpAvgSq});

struct Arenas {
  std::array<std::vector<float>, vps::kNumStateKinds> kind;
  float* data(vps::StateKind k) { return kind[static_cast<int>(k)].data(); }
  const float* data(vps::StateKind k) const { return kind[static_cast<int>(k)].data(); }
};

// Zero-filled arenas sized for `layout` (kinds absent from it stay empty).
Arenas allocate_arenas(const vps::RankLayout& layout);

// The initial value of element `index` (row-major in the full tensor) of tensor `t`: a pure
// function of (seed, tensor id, index), so every layout starts from the same model. Norm
// weights are 1; other weights N(0, 0.02), output projections of each layer scaled by
// 1/sqrt(2 * layers).
float init_value(const vps::ModelSpec& model, const vps::TensorSpec& t, std::int64_t index,
                 std::uint64_t seed);

// Fills param and master with init_value and zeroes grad, exp_avg and exp_avg_sq.
void init_state(const vps::Layout& layout, const vps::RankLayout& rank_layout, Arenas& arenas,
                std::uint64_t seed);

// Calls fn(full_offset, local_offset, count) for each row (last-dim run) of `box`, where
// full_offset is the row's row-major offset in the full tensor of `shape` and local_offset its
// offset inside the box.
template <typename Fn>
void for_each_row(const vps::Box& box, const std::vector<std::int64_t>& shape, Fn&& fn) {
  if (box.empty()) return;
  const int last = box.ndim - 1;
  const std::int64_t run = box.extent(last);
  const std::int64_t rows = box.numel() / run;
  const vps::Box full = vps::Box::of_shape(shape);
  for (std::int64_t r = 0; r < rows; ++r) {
    const vps::Coord c = box.coord_at(r * run);
    fn(full.linear_index(c), r * run, run);
  }
}

// Result of gather_vps on rank 0 (empty elsewhere): tensors[t] is the full tensor t.
struct Gathered {
  std::vector<std::vector<float>> tensors;
  std::int64_t uncovered = 0;          // elements no rank holds (must be 0)
  std::int64_t replica_mismatches = 0; // elements whose replicas differ bit-wise (must be 0)
};

// Collective over `world` (every rank calls it; ranks outside the layout contribute nothing):
// rank 0 receives every buffer of `kind` from every rank of the layout and assembles the full
// tensors in VPS coordinates, checking that replicated elements agree bit for bit.
Gathered gather_vps(const vps::Layout& layout, vps::StateKind kind, const Arenas& arenas,
                    comm::Transport& world);

// Writes this rank's segments of `kind` from full tensors (the inverse of gather_vps).
void scatter_vps(const vps::Layout& layout, const vps::RankLayout& rank_layout,
                 vps::StateKind kind, const std::vector<std::vector<float>>& full,
                 Arenas& arenas);

}  // namespace dynatrain::train
