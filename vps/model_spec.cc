#include "vps/model_spec.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace dynatrain::vps {

namespace {

ModelSpec dense(std::string name, std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                std::int64_t ffn, std::int64_t vocab) {
  ModelSpec m;
  m.name = std::move(name);
  m.hidden = hidden;
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = hidden / heads;
  m.ffn = ffn;
  m.vocab = vocab;
  return m;
}

ModelSpec gpt3(std::string name, std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t ffn) {
  ModelSpec m = dense(std::move(name), hidden, layers, heads, heads, ffn, 50257);
  m.max_positions = 2048;
  m.swiglu = false;
  m.bias = true;
  m.layernorm = true;
  m.tied_embedding = true;
  m.family = "gpt2";  // the same tensors as GPT-2 (learned positions, biases, LayerNorm, tied)
  return m;
}

const std::map<std::string, ModelSpec>& presets() {
  static const std::map<std::string, ModelSpec> table = [] {
    std::map<std::string, ModelSpec> t;
    auto add = [&](ModelSpec m) { t.emplace(m.name, std::move(m)); };
    add(gpt3("gpt3-1.3b", 2048, 24, 16, 8192));
    add(gpt3("gpt3-175b", 12288, 96, 96, 49152));
    add(dense("llama2-7b", 4096, 32, 32, 32, 11008, 32000));
    add(dense("llama2-13b", 5120, 40, 40, 40, 13824, 32000));
    add(dense("llama2-70b", 8192, 80, 64, 8, 28672, 32000));
    ModelSpec qwen = dense("qwen3-235b-a22b", 4096, 94, 64, 4, 0, 151936);
    qwen.head_dim = 128;
    qwen.experts = 128;
    qwen.top_k = 8;
    qwen.expert_ffn = 1536;
    qwen.qk_norm = true;
    qwen.family = "qwen3_moe";
    add(qwen);
    // Small models for tests and the CPU trainer: byte-level vocab, no vocab padding.
    ModelSpec tiny = dense("tiny-dense", 64, 4, 8, 4, 128, 256);
    tiny.vocab_divisible_by = 1;
    add(tiny);
    ModelSpec tiny_moe = dense("tiny-moe", 64, 4, 8, 4, 0, 256);
    tiny_moe.vocab_divisible_by = 1;
    tiny_moe.experts = 8;
    tiny_moe.top_k = 2;
    tiny_moe.expert_ffn = 32;
    tiny_moe.qk_norm = true;
    tiny_moe.family = "qwen3_moe";
    add(tiny_moe);
    return t;
  }();
  return table;
}

std::string preset_list() {
  std::string s;
  for (const auto& name : preset_names()) {
    if (!s.empty()) s += ", ";
    s += name;
  }
  return s;
}

}  // namespace

void ModelSpec::validate() const {
  auto positive = [&](const char* field, std::int64_t v) {
    if (v <= 0) DT_INPUT_ERROR("model '", name, "': ", field, "=", v, " must be positive");
  };
  positive("hidden_size", hidden);
  positive("num_hidden_layers", layers);
  // build_tensors makes a few tensors a layer: bound the count before anything is built.
  constexpr std::int64_t kMaxModelLayers = std::int64_t{1} << 20;
  if (layers > kMaxModelLayers)
    DT_INPUT_ERROR("model '", name, "': num_hidden_layers=", layers, " is beyond this build's limit of ",
                   kMaxModelLayers);
  positive("num_attention_heads", heads);
  positive("num_key_value_heads", kv_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab);
  positive("vocab_divisible_by", vocab_divisible_by);
  if (heads % kv_heads != 0)
    DT_INPUT_ERROR("model '", name, "': num_key_value_heads=", kv_heads, " must divide num_attention_heads=", heads);
  if (is_moe()) {
    positive("num_experts_per_tok", top_k);
    positive("moe_intermediate_size", expert_ffn);
    if (top_k > experts)
      DT_INPUT_ERROR("model '", name, "': num_experts_per_tok=", top_k, " exceeds num_experts=", experts);
    if (!dense_layers.empty()) positive("intermediate_size (dense layers of an MoE model)", ffn);
    if (!std::is_sorted(dense_layers.begin(), dense_layers.end()) ||
        (!dense_layers.empty() && (dense_layers.front() < 0 || dense_layers.back() >= layers)))
      DT_INPUT_ERROR("model '", name, "': dense layers must be sorted layer indices below ", layers);
  } else {
    positive("intermediate_size", ffn);
    if (shared_expert_ffn > 0 || router_bias || !dense_layers.empty())
      DT_INPUT_ERROR("model '", name, "': shared experts, router bias or dense layers need experts");
  }
  if (is_mla()) {
    positive("qk_nope_head_dim", qk_nope_dim);
    positive("qk_rope_head_dim", qk_rope_dim);
    positive("v_head_dim", v_head_dim);
    if (kv_heads != heads || head_dim != qk_nope_dim + qk_rope_dim)
      DT_INPUT_ERROR("model '", name, "': MLA needs kv_heads == heads and head_dim == qk_nope + qk_rope");
  }
}

bool ModelSpec::is_moe_layer(std::int64_t layer) const {
  return is_moe() && !std::binary_search(dense_layers.begin(), dense_layers.end(), layer);
}

std::vector<std::string> ModelSpec::features_beyond_llama() const {
  std::vector<std::string> out;
  auto note = [&](bool present, const char* what) {
    if (present) out.emplace_back(what);
  };
  note(bias, "linear biases");
  note(qkv_bias || proj_bias, "attention biases");
  note(layernorm, "LayerNorm");
  note(!swiglu, "GeLU MLP");
  note(max_positions > 0, "learned positions");
  note(tied_embedding, "tied embeddings");
  note(is_mla(), "MLA attention");
  note(shared_expert_ffn > 0, "shared experts");
  note(router_bias, "router bias");
  note(!dense_layers.empty(), "dense layers among MoE layers");
  return out;
}

std::vector<std::string> preset_names() {
  return {"tiny-dense", "tiny-moe",   "gpt3-1.3b",  "gpt3-175b",
          "llama2-7b",  "llama2-13b", "llama2-70b", "qwen3-235b-a22b"};
}

ModelSpec model_from_name(const std::string& name_or_path) {
  const auto& table = presets();
  if (auto it = table.find(name_or_path); it != table.end()) return it->second;
  if (name_or_path.size() >= 5 && name_or_path.ends_with(".json")) return model_from_hf_config(name_or_path);
  DT_INPUT_ERROR("unknown model '", name_or_path, "'; valid: ", preset_list(),
                 ", or a path to a Hugging Face config.json");
}

std::int64_t TensorSpec::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kOther: return "";
    case TensorRole::kWordEmbedding: return "embedding.word.weight";
    case TensorRole::kPositionEmbedding: return "embedding.position.weight";
    case TensorRole::kOutput: return "output.weight";
    case TensorRole::kInputNorm: return "input_norm.weight";
    case TensorRole::kInputNormBias: return "input_norm.bias";
    case TensorRole::kPostAttnNorm: return "post_attn_norm.weight";
    case TensorRole::kPostAttnNormBias: return "post_attn_norm.bias";
    case TensorRole::kFinalNorm: return "final_norm.weight";
    case TensorRole::kFinalNormBias: return "final_norm.bias";
    case TensorRole::kQkv: return "attn.qkv.weight";
    case TensorRole::kQkvBias: return "attn.qkv.bias";
    case TensorRole::kQNorm: return "attn.q_norm.weight";
    case TensorRole::kKNorm: return "attn.k_norm.weight";
    case TensorRole::kProj: return "attn.proj.weight";
    case TensorRole::kProjBias: return "attn.proj.bias";
    case TensorRole::kQDown: return "attn.q_down.weight";
    case TensorRole::kQDownNorm: return "attn.q_down_norm.weight";
    case TensorRole::kQUp: return "attn.q_up.weight";
    case TensorRole::kQ: return "attn.q.weight";
    case TensorRole::kKvDown: return "attn.kv_down.weight";
    case TensorRole::kKvDownNorm: return "attn.kv_down_norm.weight";
    case TensorRole::kKvUp: return "attn.kv_up.weight";
    case TensorRole::kFc1: return "mlp.fc1.weight";
    case TensorRole::kFc1Bias: return "mlp.fc1.bias";
    case TensorRole::kFc2: return "mlp.fc2.weight";
    case TensorRole::kFc2Bias: return "mlp.fc2.bias";
    case TensorRole::kRouter: return "mlp.router.weight";
    case TensorRole::kRouterBias: return "mlp.router.bias";
    case TensorRole::kExpertFc1: return "mlp.experts.fc1.weight";
    case TensorRole::kExpertFc2: return "mlp.experts.fc2.weight";
    case TensorRole::kSharedFc1: return "mlp.shared.fc1.weight";
    case TensorRole::kSharedFc2: return "mlp.shared.fc2.weight";
    case TensorRole::kSharedGate: return "mlp.shared.gate.weight";
    case TensorRole::kCount: break;
  }
  return "";
}

bool is_norm(TensorRole role) {
  switch (role) {
    case TensorRole::kInputNorm:
    case TensorRole::kInputNormBias:
    case TensorRole::kPostAttnNorm:
    case TensorRole::kPostAttnNormBias:
    case TensorRole::kFinalNorm:
    case TensorRole::kFinalNormBias:
    case TensorRole::kQNorm:
    case TensorRole::kKNorm:
    case TensorRole::kQDownNorm:
    case TensorRole::kKvDownNorm: return true;
    default: return false;
  }
}

namespace {

// Appends one layer's attention tensors.
template <typename Add>
void add_attention(const ModelSpec& m, Add&& layer) {
  const auto h = m.hidden;
  if (m.is_mla()) {
    // Megatron's MLA: the down projections and their norms are replicated, the up projections
    // are column-parallel over heads, the output projection row-parallel.
    const auto qk = m.qk_nope_dim + m.qk_rope_dim;
    if (m.q_lora_rank > 0) {
      layer(TensorRole::kQDown, {m.q_lora_rank, h}, TpSplit::kReplicated, 0);
      layer(TensorRole::kQDownNorm, {m.q_lora_rank}, TpSplit::kReplicated, 0);
      layer(TensorRole::kQUp, {m.heads, qk, m.q_lora_rank}, TpSplit::kDim, 0);
    } else {
      layer(TensorRole::kQ, {m.heads, qk, h}, TpSplit::kDim, 0);
    }
    layer(TensorRole::kKvDown, {m.kv_lora_rank + m.qk_rope_dim, h}, TpSplit::kReplicated, 0);
    layer(TensorRole::kKvDownNorm, {m.kv_lora_rank}, TpSplit::kReplicated, 0);
    layer(TensorRole::kKvUp, {m.heads, m.qk_nope_dim + m.v_head_dim, m.kv_lora_rank}, TpSplit::kDim, 0);
    layer(TensorRole::kProj, {h, m.heads * m.v_head_dim}, TpSplit::kDim, 1);
    return;
  }
  const auto d = m.head_dim, g = m.groups(), qg = m.q_per_group();
  layer(TensorRole::kQkv, {g, qg + 2, d, h}, TpSplit::kQkv, 0);
  if (m.bias || m.qkv_bias) layer(TensorRole::kQkvBias, {g, qg + 2, d}, TpSplit::kQkv, 0);
  if (m.qk_norm) {
    layer(TensorRole::kQNorm, {d}, TpSplit::kReplicated, 0);
    layer(TensorRole::kKNorm, {d}, TpSplit::kReplicated, 0);
  }
  layer(TensorRole::kProj, {h, m.heads * d}, TpSplit::kDim, 1);
  if (m.bias || m.proj_bias) layer(TensorRole::kProjBias, {h}, TpSplit::kReplicated, 0);
}

// Appends one layer's MLP: dense, or routed experts (+ shared expert) for an MoE layer.
template <typename Add>
void add_mlp(const ModelSpec& m, std::int64_t l, Add&& layer) {
  const auto h = m.hidden;
  if (m.is_moe_layer(l)) {
    layer(TensorRole::kRouter, {m.experts, h}, TpSplit::kReplicated, 0);
    if (m.router_bias) layer(TensorRole::kRouterBias, {m.experts}, TpSplit::kReplicated, 0);
    layer(TensorRole::kExpertFc1, {m.experts, 2, m.expert_ffn, h}, TpSplit::kDim, 2).expert = true;
    layer(TensorRole::kExpertFc2, {m.experts, h, m.expert_ffn}, TpSplit::kDim, 2).expert = true;
    if (m.shared_expert_ffn > 0) {
      layer(TensorRole::kSharedFc1, {2, m.shared_expert_ffn, h}, TpSplit::kDim, 1);
      layer(TensorRole::kSharedFc2, {h, m.shared_expert_ffn}, TpSplit::kDim, 1);
      if (m.shared_expert_gate) layer(TensorRole::kSharedGate, {1, h}, TpSplit::kReplicated, 0);
    }
  } else if (m.swiglu) {
    layer(TensorRole::kFc1, {2, m.ffn, h}, TpSplit::kDim, 1);
    layer(TensorRole::kFc2, {h, m.ffn}, TpSplit::kDim, 1);
  } else {
    layer(TensorRole::kFc1, {m.ffn, h}, TpSplit::kDim, 0);
    if (m.bias) layer(TensorRole::kFc1Bias, {m.ffn}, TpSplit::kDim, 0);
    layer(TensorRole::kFc2, {h, m.ffn}, TpSplit::kDim, 1);
    if (m.bias) layer(TensorRole::kFc2Bias, {h}, TpSplit::kReplicated, 0);
  }
}

constexpr std::int64_t kMaxElements = std::int64_t{1} << 62;

std::int64_t checked_numel(const ModelSpec& m, const TensorSpec& t) {
  std::int64_t n = 1;
  for (auto s : t.shape)
    if (__builtin_mul_overflow(n, s, &n) || n > kMaxElements)
      DT_INPUT_ERROR("model '", m.name, "': tensor ", t.name,
                     " would have more than 2^62 elements; "
                     "the config's sizes are too large");
  return n;
}

}  // namespace

std::vector<TensorSpec> build_tensors(const ModelSpec& m) {
  m.validate();
  std::vector<TensorSpec> out;
  // The name is the layer prefix ("layers.L." inside a layer) and the role's name.
  auto add = [&](std::string prefix, TensorRole role, std::vector<std::int64_t> shape, TpSplit split, int split_dim,
                 Stage stage, std::int64_t layer) -> TensorSpec& {
    TensorSpec t;
    t.id = static_cast<std::uint32_t>(out.size());
    t.name = std::move(prefix) + tensor_role_name(role);
    t.role = role;
    t.shape = std::move(shape);
    t.split = split;
    t.split_dim = static_cast<std::uint8_t>(split_dim);
    t.stage = stage;
    t.layer = layer;
    out.push_back(std::move(t));
    return out.back();
  };
  const auto h = m.hidden;
  auto& word = add("", TensorRole::kWordEmbedding, {m.vocab, h}, TpSplit::kVocab, 0, Stage::kPre, -1);
  word.also_on_last_stage = m.tied_embedding;
  if (m.max_positions > 0)
    add("", TensorRole::kPositionEmbedding, {m.max_positions, h}, TpSplit::kReplicated, 0, Stage::kPre, -1);
  auto norm = [&](const std::string& prefix, TensorRole weight, TensorRole bias, Stage stage, std::int64_t layer) {
    add(prefix, weight, {h}, TpSplit::kReplicated, 0, stage, layer);
    if (m.layernorm) add(prefix, bias, {h}, TpSplit::kReplicated, 0, stage, layer);
  };
  for (std::int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    auto layer = [&](TensorRole role, std::vector<std::int64_t> shape, TpSplit split, int dim) -> TensorSpec& {
      return add(p, role, std::move(shape), split, dim, Stage::kLayer, l);
    };
    norm(p, TensorRole::kInputNorm, TensorRole::kInputNormBias, Stage::kLayer, l);
    add_attention(m, layer);
    norm(p, TensorRole::kPostAttnNorm, TensorRole::kPostAttnNormBias, Stage::kLayer, l);
    add_mlp(m, l, layer);
  }
  norm("", TensorRole::kFinalNorm, TensorRole::kFinalNormBias, Stage::kPost, -1);
  if (!m.tied_embedding) add("", TensorRole::kOutput, {m.vocab, h}, TpSplit::kVocab, 0, Stage::kPost, -1);
  std::int64_t total = 0;
  for (const auto& t : out)
    if (__builtin_add_overflow(total, checked_numel(m, t), &total) || total > kMaxElements)
      DT_INPUT_ERROR("model '", m.name, "' would have more than 2^62 parameters; the config's sizes are too large");
  return out;
}

std::int64_t parameter_count(const ModelSpec& m) {
  std::int64_t total = 0;
  for (const auto& t : build_tensors(m)) total += t.numel();
  return total;
}

std::string describe_split(const TensorSpec& t) {
  std::string over = t.expert ? "etp" : "tp";
  std::string s;
  switch (t.split) {
    case TpSplit::kReplicated: s = "replicated over " + over; break;
    case TpSplit::kDim: s = "dim " + std::to_string(t.split_dim) + " over " + over; break;
    case TpSplit::kVocab: s = "dim 0 over " + over + " (vocab padded)"; break;
    case TpSplit::kQkv: s = "dim 0 (query groups) over " + over + "; tp > groups splits dim 1, k/v replicated"; break;
  }
  if (t.expert) s = "dim 0 over ep, " + s;
  return s;
}

}  // namespace dynatrain::vps
