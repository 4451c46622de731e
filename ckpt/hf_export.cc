#include "ckpt/hf_export.h"

#include <filesystem>

#include "ckpt/file_io.h"
#include "ckpt/safetensors.h"
#include "common/error.h"
#include "exec/box_copy.h"

namespace dynatrain::ckpt {

namespace {

// Names of one family's modules.
struct Names {
  std::string moe;             // "mlp" or "block_sparse_moe"
  std::string router;          // "gate"
  std::string gate, up, down;  // expert projections
  std::string shared;          // "shared_expert" or "shared_experts"
};

Names family_names(const vps::ModelSpec& m) {
  static const char* const kFamilies[] = {"llama",     "mistral", "qwen2",       "qwen3",      "qwen2_moe",
                                          "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3"};
  bool known = false;
  for (const char* f : kFamilies) known = known || m.family == f;
  if (!known)
    DT_INPUT_ERROR("export of family '", m.family,
                   "' is not supported; valid: llama, mistral, qwen2, "
                   "qwen3, qwen2_moe, qwen3_moe, mixtral, deepseek_v2, deepseek_v3");
  if (m.family == "mixtral") return {"block_sparse_moe", "gate", "w1", "w3", "w2", ""};
  if (m.family.rfind("deepseek", 0) == 0) return {"mlp", "gate", "gate_proj", "up_proj", "down_proj", "shared_experts"};
  return {"mlp", "gate", "gate_proj", "up_proj", "down_proj", "shared_expert"};
}

vps::Box sub_box(const std::vector<std::int64_t>& shape, int dim, std::int64_t lo, std::int64_t hi) {
  vps::Box b = vps::Box::of_shape(shape);
  b.lo[dim] = lo;
  b.hi[dim] = hi;
  return b;
}

// Fused QKV [groups, q_per_group + 2, head_dim, (hidden)] (weight or bias) as q_proj (all query
// rows, head-major), k_proj and v_proj.
void add_qkv(const vps::TensorSpec& t, const std::string& p, std::vector<HfTensor>& out) {
  const auto& s = t.shape;
  const std::string kind = t.role == vps::TensorRole::kQkv ? "weight" : "bias";
  const std::int64_t g = s[0], q = s[1] - 2, d = s[2];
  std::vector<std::int64_t> tail(s.begin() + 3, s.end());  // [hidden] or []
  auto shape_of = [&](std::int64_t rows) {
    std::vector<std::int64_t> v{rows};
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  out.push_back({p + "self_attn.q_proj." + kind, shape_of(g * q * d), t.id, sub_box(s, 1, 0, q)});
  out.push_back({p + "self_attn.k_proj." + kind, shape_of(g * d), t.id, sub_box(s, 1, q, q + 1)});
  out.push_back({p + "self_attn.v_proj." + kind, shape_of(g * d), t.id, sub_box(s, 1, q + 1, q + 2)});
}

// Routed experts [experts, 2, ffn, hidden] (fc1: gate; up) or [experts, hidden, ffn] (fc2) as
// one tensor per expert and projection.
void add_experts(const vps::TensorSpec& t, const Names& n, const std::string& p, std::vector<HfTensor>& out) {
  const auto& s = t.shape;
  for (std::int64_t e = 0; e < s[0]; ++e) {
    const std::string x = p + n.moe + ".experts." + std::to_string(e) + ".";
    if (t.role == vps::TensorRole::kExpertFc2) {
      out.push_back({x + n.down + ".weight", {s[1], s[2]}, t.id, sub_box(s, 0, e, e + 1)});
      continue;
    }
    vps::Box gate = sub_box(s, 0, e, e + 1), up = gate;
    gate.hi[1] = 1;
    up.lo[1] = 1;
    out.push_back({x + n.gate + ".weight", {s[2], s[3]}, t.id, gate});
    out.push_back({x + n.up + ".weight", {s[2], s[3]}, t.id, up});
  }
}

// The Hugging Face name of a tensor exported whole (reshaped to `shape`); "" when the role is
// exported in parts or has no Hugging Face name.
std::string whole_name(vps::TensorRole role, const Names& n, const std::string& p) {
  using R = vps::TensorRole;
  switch (role) {
    case R::kWordEmbedding: return "model.embed_tokens.weight";
    case R::kFinalNorm: return "model.norm.weight";
    case R::kOutput: return "lm_head.weight";
    case R::kInputNorm: return p + "input_layernorm.weight";
    case R::kPostAttnNorm: return p + "post_attention_layernorm.weight";
    case R::kQNorm: return p + "self_attn.q_norm.weight";
    case R::kKNorm: return p + "self_attn.k_norm.weight";
    case R::kProj: return p + "self_attn.o_proj.weight";
    case R::kProjBias: return p + "self_attn.o_proj.bias";
    case R::kQDown: return p + "self_attn.q_a_proj.weight";
    case R::kQDownNorm: return p + "self_attn.q_a_layernorm.weight";
    case R::kQUp: return p + "self_attn.q_b_proj.weight";
    case R::kQ: return p + "self_attn.q_proj.weight";
    case R::kKvDown: return p + "self_attn.kv_a_proj_with_mqa.weight";
    case R::kKvDownNorm: return p + "self_attn.kv_a_layernorm.weight";
    case R::kKvUp: return p + "self_attn.kv_b_proj.weight";
    case R::kFc2: return p + "mlp.down_proj.weight";
    case R::kRouter: return p + n.moe + "." + n.router + ".weight";
    case R::kRouterBias: return p + n.moe + "." + n.router + ".e_score_correction_bias";
    case R::kSharedFc2: return p + "mlp." + n.shared + ".down_proj.weight";
    case R::kSharedGate: return p + "mlp.shared_expert_gate.weight";
    default: return "";
  }
}

// Appends the Hugging Face tensors of VPS tensor `t` (by its role).
void add_hf_tensors(const vps::TensorSpec& t, const Names& n, const std::string& family, std::vector<HfTensor>& out) {
  using R = vps::TensorRole;
  const auto& s = t.shape;
  const std::string p = "model.layers." + std::to_string(t.layer) + ".";
  switch (t.role) {
    case R::kQkv:
    case R::kQkvBias: add_qkv(t, p, out); return;
    case R::kExpertFc1:
    case R::kExpertFc2: add_experts(t, n, p, out); return;
    case R::kFc1:
    case R::kSharedFc1: {  // [2, ffn, hidden]: gate; up
      const std::string mlp = t.role == R::kFc1 ? p + "mlp." : p + "mlp." + n.shared + ".";
      out.push_back({mlp + "gate_proj.weight", {s[1], s[2]}, t.id, sub_box(s, 0, 0, 1)});
      out.push_back({mlp + "up_proj.weight", {s[1], s[2]}, t.id, sub_box(s, 0, 1, 2)});
      return;
    }
    case R::kQUp:
    case R::kQ:
    case R::kKvUp:  // [heads, rows per head, in] -> [heads * rows, in]
      out.push_back({whole_name(t.role, n, p), {s[0] * s[1], s[2]}, t.id, t.full_box()});
      return;
    default: break;
  }
  const std::string name = whole_name(t.role, n, p);
  DT_CHECK(!name.empty(), "no Hugging Face name for ", t.name, " in family ", family);
  out.push_back({name, s, t.id, t.full_box()});
}

}  // namespace

std::vector<HfTensor> hf_tensors(const vps::ModelSpec& m) {
  const Names n = family_names(m);
  std::vector<HfTensor> out;
  for (const auto& t : vps::build_tensors(m)) add_hf_tensors(t, n, m.family, out);
  return out;
}

ExportStats export_hf(const Checkpoint& ckpt, const vps::ModelSpec& model, const std::string& out_dir) {
  const auto hf = hf_tensors(model);
  const auto full = load_full(ckpt, model, vps::StateKind::kParam);
  const int elem = ckpt.elem_bytes[static_cast<int>(vps::StateKind::kParam)];
  StHeader header;
  header.metadata = {{"format", "pt"}};
  for (const auto& t : hf) header.entries.push_back({t.name, dtype_of_size(elem), t.shape, 0, 0});
  const std::string encoded = encode_header(header);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) DT_INPUT_ERROR("cannot create export directory '", out_dir, "': ", ec.message());
  const std::string path = out_dir + "/model.safetensors";
  File f = File::create(path);
  write_exact(f.fd(), encoded.data(), encoded.size(), 0, path);
  const auto tensors = vps::build_tensors(model);
  std::vector<std::byte> stage;
  for (std::size_t i = 0; i < hf.size(); ++i) {
    const HfTensor& t = hf[i];
    const vps::TensorSpec& src = tensors[t.vps_tensor];
    stage.resize(static_cast<std::size_t>(t.box.numel()) * elem);
    exec::copy_box(t.box, full[t.vps_tensor].data(), src.full_box(), stage.data(), t.box, elem);
    write_exact(f.fd(), stage.data(), stage.size(), header.data_start + header.entries[i].begin, path);
  }
  f.sync();
  sync_dir(out_dir);
  return {static_cast<std::int64_t>(hf.size()), header.data_start + header.data_bytes};
}

}  // namespace dynatrain::ckpt
