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
  std::string moe;           // "mlp" or "block_sparse_moe"
  std::string router;        // "gate"
  std::string gate, up, down;  // expert projections
  std::string shared;        // "shared_expert" or "shared_experts"
};

Names family_names(const vps::ModelSpec& m) {
  static const char* const kFamilies[] = {"llama", "mistral", "qwen2", "qwen3", "qwen2_moe",
                                          "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3"};
  bool known = false;
  for (const char* f : kFamilies) known = known || m.family == f;
  if (!known)
    DT_INPUT_ERROR("export of family '", m.family, "' is not supported; valid: llama, mistral, qwen2, "
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

}  // namespace

std::vector<HfTensor> hf_tensors(const vps::ModelSpec& m) {
  const Names n = family_names(m);
  std::vector<HfTensor> out;
  for (const auto& t : vps::build_tensors(m)) {
    const auto& s = t.shape;
    auto whole = [&](std::string name, std::vector<std::int64_t> shape) {
      out.push_back({std::move(name), std::move(shape), t.id, t.full_box()});
    };
    auto part = [&](std::string name, std::vector<std::int64_t> shape, vps::Box box) {
      out.push_back({std::move(name), std::move(shape), t.id, box});
    };
    if (t.name == "embedding.word.weight") { whole("model.embed_tokens.weight", s); continue; }
    if (t.name == "final_norm.weight") { whole("model.norm.weight", s); continue; }
    if (t.name == "output.weight") { whole("lm_head.weight", s); continue; }
    // layers.L.<rest>
    const auto dot = t.name.find('.', 7);
    const std::string p = "model.layers." + std::to_string(t.layer) + ".";
    const std::string rest = t.name.substr(dot + 1);
    if (rest == "input_norm.weight") whole(p + "input_layernorm.weight", s);
    else if (rest == "post_attn_norm.weight") whole(p + "post_attention_layernorm.weight", s);
    else if (rest == "attn.qkv.weight" || rest == "attn.qkv.bias") {
      const std::string kind = rest == "attn.qkv.weight" ? "weight" : "bias";
      const std::int64_t g = s[0], q = s[1] - 2, d = s[2];
      std::vector<std::int64_t> tail(s.begin() + 3, s.end());  // [hidden] or []
      auto shape_of = [&](std::int64_t rows) {
        std::vector<std::int64_t> v{rows};
        v.insert(v.end(), tail.begin(), tail.end());
        return v;
      };
      part(p + "self_attn.q_proj." + kind, shape_of(g * q * d), sub_box(s, 1, 0, q));
      part(p + "self_attn.k_proj." + kind, shape_of(g * d), sub_box(s, 1, q, q + 1));
      part(p + "self_attn.v_proj." + kind, shape_of(g * d), sub_box(s, 1, q + 1, q + 2));
    } else if (rest == "attn.q_norm.weight") whole(p + "self_attn.q_norm.weight", s);
    else if (rest == "attn.k_norm.weight") whole(p + "self_attn.k_norm.weight", s);
    else if (rest == "attn.proj.weight") whole(p + "self_attn.o_proj.weight", s);
    else if (rest == "attn.proj.bias") whole(p + "self_attn.o_proj.bias", s);
    else if (rest == "attn.q_down.weight") whole(p + "self_attn.q_a_proj.weight", s);
    else if (rest == "attn.q_down_norm.weight") whole(p + "self_attn.q_a_layernorm.weight", s);
    else if (rest == "attn.q_up.weight") whole(p + "self_attn.q_b_proj.weight", {s[0] * s[1], s[2]});
    else if (rest == "attn.q.weight") whole(p + "self_attn.q_proj.weight", {s[0] * s[1], s[2]});
    else if (rest == "attn.kv_down.weight") whole(p + "self_attn.kv_a_proj_with_mqa.weight", s);
    else if (rest == "attn.kv_down_norm.weight") whole(p + "self_attn.kv_a_layernorm.weight", s);
    else if (rest == "attn.kv_up.weight") whole(p + "self_attn.kv_b_proj.weight", {s[0] * s[1], s[2]});
    else if (rest == "mlp.fc1.weight") {
      part(p + "mlp.gate_proj.weight", {s[1], s[2]}, sub_box(s, 0, 0, 1));
      part(p + "mlp.up_proj.weight", {s[1], s[2]}, sub_box(s, 0, 1, 2));
    } else if (rest == "mlp.fc2.weight") whole(p + "mlp.down_proj.weight", s);
    else if (rest == "mlp.router.weight") whole(p + n.moe + "." + n.router + ".weight", s);
    else if (rest == "mlp.router.bias") whole(p + n.moe + "." + n.router + ".e_score_correction_bias", s);
    else if (rest == "mlp.experts.fc1.weight") {
      for (std::int64_t e = 0; e < s[0]; ++e) {
        const std::string x = p + n.moe + ".experts." + std::to_string(e) + ".";
        vps::Box gate = sub_box(s, 0, e, e + 1), up = gate;
        gate.hi[1] = 1;
        up.lo[1] = 1;
        part(x + n.gate + ".weight", {s[2], s[3]}, gate);
        part(x + n.up + ".weight", {s[2], s[3]}, up);
      }
    } else if (rest == "mlp.experts.fc2.weight") {
      for (std::int64_t e = 0; e < s[0]; ++e)
        part(p + n.moe + ".experts." + std::to_string(e) + "." + n.down + ".weight", {s[1], s[2]},
             sub_box(s, 0, e, e + 1));
    } else if (rest == "mlp.shared.fc1.weight") {
      part(p + "mlp." + n.shared + ".gate_proj.weight", {s[1], s[2]}, sub_box(s, 0, 0, 1));
      part(p + "mlp." + n.shared + ".up_proj.weight", {s[1], s[2]}, sub_box(s, 0, 1, 2));
    } else if (rest == "mlp.shared.fc2.weight") whole(p + "mlp." + n.shared + ".down_proj.weight", s);
    else if (rest == "mlp.shared.gate.weight") whole(p + "mlp.shared_expert_gate.weight", s);
    else DT_CHECK(false, "no Hugging Face name for ", t.name, " in family ", m.family);
  }
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
