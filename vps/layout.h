// Layout F_P: (model, config, rank) -> the regions of the VPS that the rank holds, and where
// each sits in the rank's local buffers.
//
// State kinds and what is replicated or sharded (zero = ZeRO stage):
//   param       full local model shard; at zero=3 only the rank's flat-buffer shard
//   grad        full local model shard; at zero>=2 only the flat-buffer shard
//   master, exp_avg, exp_avg_sq (fp32 optimizer state)
//               full local model shard at zero=0; the flat-buffer shard at zero>=1
//
// Local buffers (the allocation units) follow Megatron's distributed optimizer: a rank's model
// shard is the concatenation of its local tensors in model order, dense tensors and expert
// tensors in two separate groups. Each group is cut into buckets of at least `bucket_elems`
// elements (whole tensors), and each bucket is padded to a multiple of the group's shard count
// (dp*cp for dense, edp for expert). Bucket b's shard i is elements [i*B/N, (i+1)*B/N).
//   unsharded kinds: one LocalBuffer per bucket, holding the whole bucket;
//   sharded kinds:   one LocalBuffer per bucket, holding this rank's shard of it.
// RankLayout::buffers is ordered group (dense, expert), then bucket, then kind in
// LayoutOptions::kinds order: buffer id = (group bucket index) * kinds.size() + kind index.
// Kinds with the same sharding therefore have identical segment lists bucket by bucket.
// Every Segment of a buffer is a box stored dense row-major at `offset` (elements); padding
// elements (bucket padding, vocab padding rows) belong to no segment.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vps/box.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"
#include "vps/state_kind.h"

namespace dynatrain::vps {

struct LayoutOptions {
  // Bytes per element of each state kind, indexed by StateKind (vps/state_kind.h: bf16 weights
  // and grads, fp32 optimizer).
  ElemBytes elem_bytes = mixed_elem_bytes();
  // Minimum bucket size in elements; Megatron uses max(40M, 1M * dp).
  std::int64_t bucket_elems = 40'000'000;
  std::vector<StateKind> kinds = parse_state_kinds("all");
  // Every local tensor shard starts at a multiple of `align_elems` elements in its bucket, and
  // with ZeRO (zero >= 1) each bucket is padded to a multiple of align_elems * shard count, so
  // every shard of it starts at such a multiple too; the gaps are padding. 1: packed (the
  // default). kPageAlignElems puts every tensor on a 4 KiB page boundary in every buffer of
  // every kind, so a kept tensor that sits at a new offset after a switch can be moved by
  // remapping its pages instead of copying them (exec/README.md).
  std::int64_t align_elems = 1;
};
// 2048 elements: a page of 2-byte elements, two pages of 4-byte ones.
inline constexpr std::int64_t kPageAlignElems = 2048;

// A box of one logical tensor stored dense row-major at `offset` elements into its buffer.
struct Segment {
  std::uint32_t tensor = 0;
  Box box;
  std::int64_t offset = 0;
};

// True when `kind` holds only the rank's ZeRO shard of each bucket at this ZeRO stage.
bool is_sharded(StateKind kind, int zero);

// One allocation unit on a rank. `arena_offset` is where the unit starts when all buffers of the
// same kind are laid end to end in one arena (how the trainer keeps one flat buffer per kind).
struct LocalBuffer {
  std::uint32_t id = 0;  // index in RankLayout::buffers
  StateKind kind = StateKind::kParam;
  bool expert_group = false;
  std::int32_t bucket = 0;
  std::int64_t numel = 0;
  std::int64_t arena_offset = 0;
  std::vector<Segment> segments;  // sorted by offset, disjoint
};

struct RankLayout {
  int rank = 0;
  std::vector<LocalBuffer> buffers;
  std::int64_t bytes(const LayoutOptions& options) const;
};

// Where a local tensor shard lives in the rank's model buffer (the unsharded param layout):
// `boxes` stored one after another from `offset` in bucket `bucket`; `numel` includes padding.
struct LocalShard {
  std::uint32_t tensor = 0;
  bool expert_group = false;
  std::int32_t bucket = 0;
  std::int64_t offset = 0;  // elements into the bucket
  std::int64_t numel = 0;
  std::vector<Box> boxes;
  std::vector<std::int64_t> local_shape;  // shape of the local tensor, e.g. [vocab_padded/tp, h]
};

// Everything F_P needs, built once per (model, config, options) and shared by all ranks.
class Layout {
 public:
  Layout(const ModelSpec& model, ParallelConfig config, LayoutOptions options = {});
  // A layout of the caller's own logical tensors instead of build_tensors(model) (the Python
  // binding's user models). Of `model` only these fields are read: name (plans pair layouts by
  // it), layers (the pipeline split; every kLayer tensor's layer must lie in [0, layers)) and
  // vocab_divisible_by (kVocab padding). Tensor ids are reassigned to list positions. Throws
  // InputError naming the tensor when a split does not divide its dimension (TpSplit kDim and
  // kVocab, and dim 0 of expert tensors over ep, are supported; kQkv is not), and for configs
  // the tensors cannot take (pp above the layers, ep > 1 without expert tensors).
  Layout(std::vector<TensorSpec> tensors, const ModelSpec& model, ParallelConfig config, LayoutOptions options = {});

  const ModelSpec& model() const { return model_; }
  const ParallelConfig& config() const { return config_; }
  const LayoutOptions& options() const { return options_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // The same tensors, built the way this layout's were (from the ModelSpec, or the caller's own
  // list), in another config and with other options: the layouts a checkpoint load plans
  // between. InputError when the config cannot take them.
  Layout relaid(ParallelConfig config, LayoutOptions options) const;

  // The local tensor shards of `rank` in model-buffer order (empty for inactive ranks).
  std::vector<LocalShard> local_shards(int rank) const;
  // F_P(rank): every buffer of every requested state kind with its segments.
  RankLayout rank_layout(int rank) const;
  // The same without building a RankLayout: visit(buffer with empty segments, its segments)
  // for every buffer in id order. For hot loops (the planner lays out every rank).
  // `kind_mask` (bit k = StateKind k) skips the other kinds; buffer ids do not change.
  using BufferVisitor = std::function<void(const LocalBuffer&, const std::vector<Segment>&)>;
  void visit_buffers(int rank, const BufferVisitor& visit, unsigned kind_mask = ~0u) const;

 private:
  // local_shards depends only on a rank's (tp, pp, ep, etp) coordinates; computed once per such
  // class and kept (entries are never erased, so references stay valid). Thread-safe.
  struct ShardCache;
  const std::vector<LocalShard>& cached_shards(int rank) const;
  std::vector<LocalShard> compute_shards(int rank) const;

  ModelSpec model_;
  ParallelConfig config_;
  LayoutOptions options_;
  std::vector<TensorSpec> tensors_;
  bool own_tensors_ = false;  // built from the caller's list (second constructor)
  std::shared_ptr<ShardCache> shard_cache_;
};

}  // namespace dynatrain::vps
