// Model specs and the logical tensors of the Virtual Parameter Space.
//
// A ModelSpec holds the shape numbers of a transformer (presets, or a Hugging Face config.json).
// build_tensors() turns it into the list of logical tensors, each unsharded with its global
// shape, and says how tensor parallelism splits each one. Fused Megatron tensors get a logical
// shape that makes every tensor-parallel shard a box (docs/vps.md has the full table):
//   attn.qkv.weight    [groups, q_per_group + 2, head_dim, hidden]  (dim 1: q heads..., k, v)
//   mlp.fc1.weight     [2, ffn, hidden] for SwiGLU (dim 0: gate, up)
//   experts.fc1.weight [experts, 2, expert_ffn, hidden];  experts.fc2.weight [experts, hidden, expert_ffn]
// The word embedding (and an untied output layer) is [vocab, hidden] without padding: padding
// rows that Megatron adds so the vocab divides by tp exist only in local buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vps/box.h"

namespace dynatrain::vps {

struct ModelSpec {
  std::string name;
  std::int64_t hidden = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;      // query heads
  std::int64_t kv_heads = 0;   // key/value heads (query groups); == heads without GQA
  std::int64_t head_dim = 0;   // defaults to hidden / heads
  std::int64_t ffn = 0;        // dense MLP intermediate size
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // > 0: learned position embedding of that many rows
  bool swiglu = true;          // false: GeLU MLP with a single fc1
  bool bias = false;           // linear biases (GPT-3 style)
  bool layernorm = false;      // LayerNorm with bias; false: RMSNorm (weight only)
  bool qk_norm = false;
  bool tied_embedding = false;
  std::int64_t experts = 0;    // 0: dense model
  std::int64_t top_k = 0;
  std::int64_t expert_ffn = 0;
  std::int64_t vocab_divisible_by = 128;  // Megatron pads vocab to a multiple of this * tp

  bool is_moe() const { return experts > 0; }
  std::int64_t groups() const { return kv_heads; }
  std::int64_t q_per_group() const { return heads / kv_heads; }
  // Throws InputError naming the field when the numbers cannot form a model.
  void validate() const;
};

// Names accepted by model_from_name, in display order.
std::vector<std::string> preset_names();
// A preset name, or a path to a Hugging Face style config.json. Throws InputError otherwise.
ModelSpec model_from_name(const std::string& name_or_path);
ModelSpec model_from_hf_config(const std::string& path);

// How tensor parallelism (or, for experts, expert-tensor parallelism) splits a tensor.
enum class TpSplit : std::uint8_t {
  kReplicated,  // every tp rank holds the whole tensor (norms, router, position embedding)
  kDim,         // evenly along `split_dim`
  kVocab,       // along dim 0 after padding dim 0 to a multiple of vocab_divisible_by * tp
  kQkv,         // along dim 0 (query groups); with tp > groups a group's heads are split
                // along dim 1 and its k, v rows are replicated (see layout.cc)
};

// Where a tensor lives in the pipeline: before the first layer, in a layer, or after the last.
enum class Stage : std::uint8_t { kPre, kLayer, kPost };

struct TensorSpec {
  std::uint32_t id = 0;  // index into the model's tensor list
  std::string name;      // e.g. "layers.3.attn.qkv.weight"
  std::vector<std::int64_t> shape;
  TpSplit split = TpSplit::kReplicated;
  std::uint8_t split_dim = 0;
  bool expert = false;   // dim 0 is the expert index: split over ep, `split` applies with etp
  Stage stage = Stage::kLayer;
  std::int64_t layer = -1;  // for Stage::kLayer
  // Held by the last pipeline stage too (tied output layer when pp > 1).
  bool also_on_last_stage = false;

  std::int64_t numel() const;
  Box full_box() const { return Box::of_shape(shape); }
};

std::vector<TensorSpec> build_tensors(const ModelSpec& model);

}  // namespace dynatrain::vps
