// Hugging Face export: a checkpoint's weights as one unsharded safetensors file with the tensor
// names and shapes of the family's transformers implementation.
//
// Every Hugging Face tensor is a sub-box of one VPS tensor, reshaped: fused QKV
// [groups, q_per_group + 2, head_dim, hidden] gives q_proj (all query rows, head-major), k_proj
// and v_proj; SwiGLU fc1 [2, ffn, hidden] gives gate_proj and up_proj; expert tensors give one
// tensor per expert. Families: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral,
// deepseek_v2, deepseek_v3 (GPT-2's Conv1D weights are transposed and GPT-NeoX's names differ:
// refused with an InputError).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "vps/box.h"
#include "vps/model_spec.h"

namespace dynatrain::ckpt {

struct HfTensor {
  std::string name;                 // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<std::int64_t> shape;  // the Hugging Face shape
  std::uint32_t vps_tensor = 0;     // the VPS tensor it comes from
  vps::Box box;                     // the sub-box of that tensor, row-major = the HF tensor
};

// The Hugging Face tensors of `model`, in VPS order. Throws InputError for other families.
std::vector<HfTensor> hf_tensors(const vps::ModelSpec& model);

struct ExportStats {
  std::int64_t tensors = 0;
  std::uint64_t bytes = 0;  // file bytes
};

// Writes OUT/model.safetensors (fsync'd) from the checkpoint's param state.
ExportStats export_hf(const Checkpoint& ckpt, const vps::ModelSpec& model, const std::string& out_dir);

}  // namespace dynatrain::ckpt
