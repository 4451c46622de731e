#include "train/zero.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace dynatrain::train {

void ZeroWork::reset(const vps::RankLayout& layout, int zero, int dense_shards, int expert_shards,
                     const vps::ElemBytes& elem) {
  copies_.clear();
  for (const auto& b : layout.buffers) {
    if (b.kind != vps::StateKind::kMaster) continue;
    const std::int64_t full = b.numel * (b.expert_group ? expert_shards : dense_shards);
    for (vps::StateKind kind : {vps::StateKind::kParam, vps::StateKind::kGrad})
      if (vps::is_sharded(kind, zero))
        copies_[{static_cast<int>(kind), b.expert_group, b.bucket}].assign(
            static_cast<std::size_t>(full) * elem[static_cast<int>(kind)], std::byte{0});
  }
}

std::byte* ZeroWork::full_bytes(vps::StateKind kind, const vps::LocalBuffer& state_buffer, const Arenas& arenas) {
  DT_CHECK(state_buffer.kind == kind, "buffer ", state_buffer.id, " is not of kind ", vps::state_kind_name(kind));
  auto it = copies_.find({static_cast<int>(kind), state_buffer.expert_group, state_buffer.bucket});
  return it == copies_.end() ? arenas.bytes(state_buffer) : it->second.data();
}

float* ZeroWork::full(vps::StateKind kind, const vps::LocalBuffer& state_buffer, const Arenas& arenas) {
  DT_CHECK(arenas.elem_bytes(kind) == 4, vps::state_kind_name(kind), " is not fp32");
  return reinterpret_cast<float*>(full_bytes(kind, state_buffer, arenas));
}

void ZeroWork::zero_grads() {
  for (auto& [key, copy] : copies_)
    if (std::get<0>(key) == static_cast<int>(vps::StateKind::kGrad)) std::fill(copy.begin(), copy.end(), std::byte{0});
}

void all_gather_or_copy(comm::Transport& group, const float* shard, float* full, std::int64_t count) {
  if (group.size() == 1)
    std::memcpy(full, shard, static_cast<std::size_t>(count) * sizeof(float));
  else
    group.all_gather(shard, full, static_cast<std::size_t>(count));
}

void all_gather_bytes_or_copy(comm::Transport& group, const void* shard, void* full, std::size_t bytes_per_rank) {
  if (group.size() == 1)
    std::memcpy(full, shard, bytes_per_rank);
  else
    group.all_gather_bytes(shard, full, bytes_per_rank);
}

void reduce_scatter_or_copy(comm::Transport& group, const float* full, float* shard, std::int64_t count) {
  if (group.size() == 1)
    std::memcpy(shard, full, static_cast<std::size_t>(count) * sizeof(float));
  else
    group.reduce_scatter_sum(full, shard, static_cast<std::size_t>(count));
}

}  // namespace dynatrain::train
