// Training state in the Virtual Parameter Space: one block per buffer of every state kind, laid
// out by vps::Layout, plus the functions that fill, gather and scatter it in VPS coordinates.
// Element sizes per kind: fp32 everywhere, or with --bf16 (vps::bf16_param_elem_bytes) bf16
// params and fp32 grads, master and moments.
//
// Arena contract (shared with exec/ and plan/, which never see torch):
//   every LocalBuffer of the RankLayout has its own block (Arenas::data(buffer)); a buffer's
//   Segment s holds box s.box of tensor s.tensor dense row-major at s.offset. Padding elements
//   (bucket padding, vocab padding rows) belong to no segment and stay zero. Local torch
//   parameters are views into the param blocks (trainer.cc).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "comm/transport.h"
#include "exec/engine.h"
#include "vps/layout.h"

namespace dynatrain::train {

// The trainer's element sizes: every kind fp32, or with `bf16` the params bf16 (the rest fp32).
constexpr vps::ElemBytes trainer_elem_bytes(bool bf16) {
  return bf16 ? vps::bf16_param_elem_bytes() : vps::fp32_elem_bytes();
}

// The layout options every trainer layout uses.
vps::LayoutOptions trainer_layout_options(
    std::int64_t bucket_elems,
    std::vector<vps::StateKind> kinds = {vps::StateKind::kParam, vps::StateKind::kGrad, vps::StateKind::kMaster,
                                         vps::StateKind::kExpAvg, vps::StateKind::kExpAvgSq},
    bool bf16 = false);

// The trainer's state: one block per LocalBuffer of its RankLayout (a buffer of zero elements has
// none), each taken from a StateAllocator -- the trainer's exec::PoolAllocator, so that a switch
// builds the destination in the memory its source gives back as it drains. Blocks created here
// are zero-filled; every block still owned is given back when the Arenas are destroyed.
// A buffer is named by (kind, expert group, bucket), as in the RankLayout. A block of buffer b
// holds b.numel elements of elem_bytes(b.kind) bytes (the layout's element sizes).
class Arenas {
 public:
  Arenas() = default;
  explicit Arenas(exec::StateAllocator& alloc, vps::ElemBytes elem = vps::fp32_elem_bytes())
      : alloc_(&alloc), elem_(elem) {}
  // Zero-filled blocks for every buffer of `layout`.
  Arenas(const vps::RankLayout& layout, exec::StateAllocator& alloc, vps::ElemBytes elem = vps::fp32_elem_bytes());
  ~Arenas();
  Arenas(Arenas&& other) noexcept;
  Arenas& operator=(Arenas&& other) noexcept;
  Arenas(const Arenas&) = delete;
  Arenas& operator=(const Arenas&) = delete;

  int elem_bytes(vps::StateKind kind) const { return elem_[static_cast<int>(kind)]; }
  const vps::ElemBytes& elem() const { return elem_; }
  std::size_t block_bytes(const vps::LocalBuffer& b) const {
    return static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(elem_bytes(b.kind));
  }
  // The block of buffer `b`; nullptr if this rank holds none.
  std::byte* bytes(const vps::LocalBuffer& b) const;
  // The same, typed: data() for a kind of 4-byte (fp32) elements, bf16() for 2-byte ones
  // (train/bf16.h); InvariantError for the other size.
  float* data(const vps::LocalBuffer& b) const;
  std::uint16_t* bf16(const vps::LocalBuffer& b) const;
  // Adopts `p` (from the same allocator, block_bytes(b)) as b's block.
  void set(const vps::LocalBuffer& b, std::byte* p);
  // Gives up b's block without releasing it (the caller releases it); nullptr if none.
  std::byte* take(const vps::LocalBuffer& b);
  // Releases b's block to the allocator now.
  void release(const vps::LocalBuffer& b);
  // Zero-filled blocks for the buffers of `layout` that have none yet.
  void fill_missing(const vps::RankLayout& layout);

 private:
  using Key = std::tuple<int, bool, std::int32_t>;
  static Key key(const vps::LocalBuffer& b) { return {static_cast<int>(b.kind), b.expert_group, b.bucket}; }
  struct Block {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
  };
  void release_all();
  exec::StateAllocator* alloc_ = nullptr;
  vps::ElemBytes elem_ = vps::fp32_elem_bytes();
  std::map<Key, Block> blocks_;
};

// Total bytes of the buffers of `layout` at element sizes `elem` (what Arenas(layout) holds).
std::size_t state_bytes(const vps::RankLayout& layout, const vps::ElemBytes& elem);

// The initial value of element `index` (row-major in the full tensor) of tensor `t`: a pure
// function of (seed, tensor id, index), so every layout starts from the same model. Norm
// weights are 1; other weights N(0, 0.02), output projections of each layer scaled by
// 1/sqrt(2 * layers).
float init_value(const vps::ModelSpec& model, const vps::TensorSpec& t, std::int64_t index, std::uint64_t seed);

// Fills param and master with init_value and zeroes grad, exp_avg and exp_avg_sq. bf16 params
// are init_value rounded to bf16, as the optimizer derives them from the master. Kinds in
// `loaded` are only zeroed: a checkpoint load overwrites every element of them next.
void init_state(const vps::Layout& layout, const vps::RankLayout& rank_layout, Arenas& arenas, std::uint64_t seed,
                const std::vector<vps::StateKind>& loaded = {});

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

// Result of gather_vps on rank 0 (empty elsewhere): tensors[t] is the full tensor t, as floats
// (bf16 elements widened exactly, so bit comparisons still compare the bf16 bits).
struct Gathered {
  std::vector<std::vector<float>> tensors;
  std::int64_t uncovered = 0;           // elements no rank holds (must be 0)
  std::int64_t replica_mismatches = 0;  // elements whose replicas differ bit-wise (must be 0)
};

// Collective over `world` (every rank calls it; ranks outside the layout contribute nothing):
// rank 0 receives every buffer of `kind` from every rank of the layout and assembles the full
// tensors in VPS coordinates, checking that replicated elements agree bit for bit.
Gathered gather_vps(const vps::Layout& layout, vps::StateKind kind, const Arenas& arenas, comm::Transport& world);

// Writes this rank's segments of `kind` from full tensors (the inverse of gather_vps).
void scatter_vps(const vps::Layout& layout, const vps::RankLayout& rank_layout, vps::StateKind kind,
                 const std::vector<std::vector<float>>& full, Arenas& arenas);

}  // namespace dynatrain::train
