// Model specs and the logical tensors of the Virtual Parameter Space.
//
// A ModelSpec holds the shape numbers of a transformer (presets, or a Hugging Face config.json).
// build_tensors() turns it into the list of logical tensors, each unsharded with its global
// shape, and says how tensor parallelism splits each one. Fused Megatron tensors get a logical
// shape that makes every tensor-parallel shard a box (docs/vps.md has the full table):
//   attn.qkv.weight    [groups, q_per_group + 2, head_dim, hidden]  (dim 1: q heads..., k, v)
//   mlp.fc1.weight     [2, ffn, hidden] for SwiGLU (dim 0: gate, up)
//   experts.fc1.weight [experts, 2, expert_ffn, hidden];  experts.fc2.weight [experts, hidden, expert_ffn]
//   MLA (DeepSeek-V2/V3): attn.q_up.weight [heads, qk_nope + qk_rope, q_lora_rank],
//                         attn.kv_up.weight [heads, qk_nope + v_head_dim, kv_lora_rank]
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
  // Hugging Face model_type whose tensor names export uses: llama, mistral, qwen2, qwen3,
  // qwen2_moe, qwen3_moe, mixtral, deepseek_v2, deepseek_v3, gpt2, gpt_neox.
  std::string family = "llama";
  std::int64_t hidden = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;     // query heads
  std::int64_t kv_heads = 0;  // key/value heads (query groups); == heads without GQA
  std::int64_t head_dim = 0;  // defaults to hidden / heads
  std::int64_t ffn = 0;       // dense MLP intermediate size
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // > 0: learned position embedding of that many rows
  bool swiglu = true;              // false: GeLU MLP with a single fc1
  bool bias = false;               // every linear layer has a bias (GPT-2/3, GPT-NeoX)
  bool qkv_bias = false;           // only q, k, v have biases (Qwen2; Llama attention_bias)
  bool proj_bias = false;          // the attention output projection has a bias (Llama attention_bias)
  bool layernorm = false;          // LayerNorm with bias; false: RMSNorm (weight only)
  bool qk_norm = false;
  bool tied_embedding = false;
  std::int64_t experts = 0;  // 0: dense model
  std::int64_t top_k = 0;
  std::int64_t expert_ffn = 0;
  // Layers of an MoE model whose MLP is dense (`ffn` rows), sorted: DeepSeek's first_k_dense_replace
  // and moe_layer_freq, Qwen-MoE's decoder_sparse_step and mlp_only_layers.
  std::vector<std::int64_t> dense_layers;
  std::int64_t shared_expert_ffn = 0;  // > 0: a shared expert MLP of that many rows in MoE layers
  bool shared_expert_gate = false;     // Qwen2-MoE: sigmoid gate [1, hidden] on the shared expert
  bool router_bias = false;            // DeepSeek-V3 (noaux_tc): per-expert score correction bias
  // Multi-head latent attention (DeepSeek-V2/V3) when kv_lora_rank > 0; then kv_heads == heads
  // and head_dim == qk_nope_dim + qk_rope_dim. q_lora_rank == 0: queries are projected directly.
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_dim = 0;
  std::int64_t qk_rope_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t vocab_divisible_by = 128;  // Megatron pads vocab to a multiple of this * tp

  bool is_moe() const { return experts > 0; }
  bool is_moe_layer(std::int64_t layer) const;
  bool is_mla() const { return kv_lora_rank > 0; }
  // Features beyond the Llama-style model the reference trainer implements (RMSNorm, RoPE,
  // SwiGLU, no biases, untied, plain GQA, routed experts in every layer); empty when none.
  std::vector<std::string> features_beyond_llama() const;
  std::int64_t groups() const { return kv_heads; }
  std::int64_t q_per_group() const { return heads / kv_heads; }
  // Throws InputError naming the field when the numbers cannot form a model.
  void validate() const;
};

// Names accepted by model_from_name, in display order.
std::vector<std::string> preset_names();
// A preset name, or a path to a Hugging Face style config.json. Throws InputError otherwise.
ModelSpec model_from_name(const std::string& name_or_path);
// Reads a Hugging Face config.json of a family listed in ModelSpec::family. Throws InputError
// naming the field for anything it cannot model exactly: an unknown model_type, a field that
// would change the tensor set (quantization_config, mlp_bias, ...), a wrong type, a value out of
// range, a file that is not a small JSON object.
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

// What a tensor is in the model: the contract between build_tensors and every reader that
// needs to know (the trainer's module views, the weight init, the Hugging Face export). Readers
// switch on the role, never on the name; the name is for display and file formats only and is
// built from the role (tensor_role_name) by build_tensors. kOther: a tensor no model spec
// describes (the Python binding's user models).
enum class TensorRole : std::uint8_t {
  kOther,
  kWordEmbedding,
  kPositionEmbedding,
  kOutput,
  kInputNorm,
  kInputNormBias,
  kPostAttnNorm,
  kPostAttnNormBias,
  kFinalNorm,
  kFinalNormBias,
  kQkv,
  kQkvBias,
  kQNorm,
  kKNorm,
  kProj,
  kProjBias,  // attention (fused QKV)
  kQDown,
  kQDownNorm,
  kQUp,
  kQ,
  kKvDown,
  kKvDownNorm,
  kKvUp,  // MLA attention
  kFc1,
  kFc1Bias,
  kFc2,
  kFc2Bias,  // dense MLP
  kRouter,
  kRouterBias,
  kExpertFc1,
  kExpertFc2,  // MoE
  kSharedFc1,
  kSharedFc2,
  kSharedGate,  // shared expert
  kCount        // number of roles (not a role)
};
// The role's part of a tensor name: the whole name outside the layers ("embedding.word.weight",
// "final_norm.weight", "output.weight"), the part after "layers.L." inside them
// ("attn.qkv.weight"); "" for kOther. Distinct for every role.
const char* tensor_role_name(TensorRole role);
// A norm's weight or bias (RMSNorm / LayerNorm, q/k norms, MLA's down-projection norms).
bool is_norm(TensorRole role);

struct TensorSpec {
  std::uint32_t id = 0;  // index into the model's tensor list
  std::string name;      // e.g. "layers.3.attn.qkv.weight"
  std::vector<std::int64_t> shape;
  TpSplit split = TpSplit::kReplicated;
  std::uint8_t split_dim = 0;
  bool expert = false;  // dim 0 is the expert index: split over ep, `split` applies with etp
  Stage stage = Stage::kLayer;
  std::int64_t layer = -1;  // for Stage::kLayer
  // Held by the last pipeline stage too (tied output layer when pp > 1).
  bool also_on_last_stage = false;
  TensorRole role = TensorRole::kOther;  // what it is (build_tensors sets it for every tensor)

  std::int64_t numel() const;  // build_tensors guarantees it does not overflow
  Box full_box() const { return Box::of_shape(shape); }
};

// The logical tensors in model order. Throws InputError when a tensor or the total would have
// more than 2^62 elements.
std::vector<TensorSpec> build_tensors(const ModelSpec& model);
std::int64_t parameter_count(const ModelSpec& model);
// How `split` shards a tensor, in words (for `plan --describe`), e.g. "dim 1 over tp".
std::string describe_split(const TensorSpec& tensor);

}  // namespace dynatrain::vps
