// ZeRO-2/3 in the trainer: the full-bucket working copies the model computes on when the state
// buffers hold only this rank's shard (torch-free).
//
// vps/layout.h shards a bucket's grad buffer at zero >= 2 and its param buffer at zero = 3: the
// rank's LocalBuffer then holds elements [i*B/N, (i+1)*B/N) of the bucket (N = shard count: dp*cp
// for dense buckets, edp for expert buckets). Those shard buffers are the training state the
// engine moves and the checkpoints save. The model's autograd views need whole buckets, so for
// each sharded kind the trainer keeps one full-bucket working copy (B elements of the kind's size:
// bf16 params under --bf16, else fp32) outside the state:
//   param (zero = 3): all-gathered from the param shards before each forward (whole model, not
//                     per layer); never written back (the optimizer writes the shard);
//   grad  (zero >= 2): autograd accumulates into it; the step reduce-scatters it into the grad
//                     shard and Adam reads only the shard.
// A working copy is derived data: it is rebuilt after every switch and never moved.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "train/state.h"
#include "vps/layout.h"

namespace dynatrain::train {

class ZeroWork {
 public:
  // Working copies for the sharded param / grad buffers of `layout` at stage `zero`; a bucket's
  // full size is its master shard's numel times the bucket's shard count (`dense_shards` or
  // `expert_shards`), of elements of `elem`'s sizes. Copies start zeroed.
  void reset(const vps::RankLayout& layout, int zero, int dense_shards, int expert_shards,
             const vps::ElemBytes& elem = vps::fp32_elem_bytes());

  // Where the model's view of bucket (expert, bucket) of `kind` (param or grad) starts: the
  // working copy when the kind is sharded, else the state buffer in `arenas`.
  std::byte* full_bytes(vps::StateKind kind, const vps::LocalBuffer& state_buffer, const Arenas& arenas);
  // The same for a kind of fp32 elements.
  float* full(vps::StateKind kind, const vps::LocalBuffer& state_buffer, const Arenas& arenas);

  // Zeroes every grad working copy (before a step's backward).
  void zero_grads();

 private:
  using Key = std::tuple<int, bool, std::int32_t>;
  std::map<Key, std::vector<std::byte>> copies_;
};

// All-gather of `count` floats per rank of `group` into `full` (a copy when the group has one rank).
void all_gather_or_copy(comm::Transport& group, const float* shard, float* full, std::int64_t count);
// The same for `bytes_per_rank` bytes of any element type (bf16 params).
void all_gather_bytes_or_copy(comm::Transport& group, const void* shard, void* full, std::size_t bytes_per_rank);
// Reduce-scatter (sum) of `full` into this rank's `count` floats (a copy for a one-rank group).
void reduce_scatter_or_copy(comm::Transport& group, const float* full, float* shard, std::int64_t count);

}  // namespace dynatrain::train
