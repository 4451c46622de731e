#include "vps/model_spec.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace dynatrain::vps {

namespace {

ModelSpec dense(std::string name, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
                std::int64_t kv_heads, std::int64_t ffn, std::int64_t vocab) {
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

ModelSpec gpt3(std::string name, std::int64_t hidden, std::int64_t layers, std::int64_t heads,
               std::int64_t ffn) {
  ModelSpec m = dense(std::move(name), hidden, layers, heads, heads, ffn, 50257);
  m.max_positions = 2048;
  m.swiglu = false;
  m.bias = true;
  m.layernorm = true;
  m.tied_embedding = true;
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
  positive("num_attention_heads", heads);
  positive("num_key_value_heads", kv_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab);
  positive("vocab_divisible_by", vocab_divisible_by);
  if (heads % kv_heads != 0)
    DT_INPUT_ERROR("model '", name, "': num_key_value_heads=", kv_heads,
                   " must divide num_attention_heads=", heads);
  if (is_moe()) {
    positive("num_experts_per_tok", top_k);
    positive("moe_intermediate_size", expert_ffn);
    if (top_k > experts)
      DT_INPUT_ERROR("model '", name, "': num_experts_per_tok=", top_k,
                     " exceeds num_experts=", experts);
  } else {
    positive("intermediate_size", ffn);
  }
}

std::vector<std::string> preset_names() {
  return {"tiny-dense", "tiny-moe", "gpt3-1.3b", "gpt3-175b", "llama2-7b",
          "llama2-13b", "llama2-70b", "qwen3-235b-a22b"};
}

ModelSpec model_from_name(const std::string& name_or_path) {
  const auto& table = presets();
  if (auto it = table.find(name_or_path); it != table.end()) return it->second;
  if (name_or_path.size() >= 5 && name_or_path.ends_with(".json"))
    return model_from_hf_config(name_or_path);
  DT_INPUT_ERROR("unknown model '", name_or_path, "'; valid: ", preset_list(),
                 ", or a path to a Hugging Face config.json");
}

ModelSpec model_from_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) DT_INPUT_ERROR("cannot open model config '", path, "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    DT_INPUT_ERROR("model config '", path, "' is not valid JSON: ", e.what());
  }
  auto get = [&](const char* key, std::int64_t fallback) -> std::int64_t {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number_integer())
      DT_INPUT_ERROR("model config '", path, "': ", key, " must be an integer, got ", j[key].dump());
    return j[key].get<std::int64_t>();
  };
  auto require = [&](const char* key) {
    if (!j.contains(key)) DT_INPUT_ERROR("model config '", path, "' lacks required field ", key);
    return get(key, 0);
  };
  ModelSpec m;
  m.name = path;
  m.hidden = require("hidden_size");
  m.layers = require("num_hidden_layers");
  m.heads = require("num_attention_heads");
  m.kv_heads = get("num_key_value_heads", m.heads);
  m.head_dim = get("head_dim", m.heads > 0 ? m.hidden / m.heads : 0);
  m.vocab = require("vocab_size");
  m.experts = get("num_experts", get("num_local_experts", 0));
  m.top_k = get("num_experts_per_tok", 0);
  m.expert_ffn = get("moe_intermediate_size", get("intermediate_size", 0));
  m.ffn = m.experts > 0 ? 0 : require("intermediate_size");
  m.tied_embedding = j.value("tie_word_embeddings", false);
  const std::string type = j.value("model_type", "");
  m.qk_norm = type.starts_with("qwen3");
  m.validate();
  return m;
}

std::int64_t TensorSpec::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::vector<TensorSpec> build_tensors(const ModelSpec& m) {
  m.validate();
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, TpSplit split, int split_dim,
                 Stage stage, std::int64_t layer) -> TensorSpec& {
    TensorSpec t;
    t.id = static_cast<std::uint32_t>(out.size());
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.split = split;
    t.split_dim = static_cast<std::uint8_t>(split_dim);
    t.stage = stage;
    t.layer = layer;
    out.push_back(std::move(t));
    return out.back();
  };
  const auto h = m.hidden, d = m.head_dim, g = m.groups(), qg = m.q_per_group();
  auto& word = add("embedding.word.weight", {m.vocab, h}, TpSplit::kVocab, 0, Stage::kPre, -1);
  word.also_on_last_stage = m.tied_embedding;
  if (m.max_positions > 0)
    add("embedding.position.weight", {m.max_positions, h}, TpSplit::kReplicated, 0, Stage::kPre, -1);
  auto norm = [&](const std::string& name, Stage stage, std::int64_t layer) {
    add(name + ".weight", {h}, TpSplit::kReplicated, 0, stage, layer);
    if (m.layernorm) add(name + ".bias", {h}, TpSplit::kReplicated, 0, stage, layer);
  };
  for (std::int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    auto layer = [&](const std::string& name, std::vector<std::int64_t> shape, TpSplit split,
                     int dim = 0) -> TensorSpec& {
      return add(p + name, std::move(shape), split, dim, Stage::kLayer, l);
    };
    norm(p + "input_norm", Stage::kLayer, l);
    layer("attn.qkv.weight", {g, qg + 2, d, h}, TpSplit::kQkv);
    if (m.bias) layer("attn.qkv.bias", {g, qg + 2, d}, TpSplit::kQkv);
    if (m.qk_norm) {
      layer("attn.q_norm.weight", {d}, TpSplit::kReplicated);
      layer("attn.k_norm.weight", {d}, TpSplit::kReplicated);
    }
    layer("attn.proj.weight", {h, m.heads * d}, TpSplit::kDim, 1);
    if (m.bias) layer("attn.proj.bias", {h}, TpSplit::kReplicated);
    norm(p + "post_attn_norm", Stage::kLayer, l);
    if (m.is_moe()) {
      layer("mlp.router.weight", {m.experts, h}, TpSplit::kReplicated);
      layer("mlp.experts.fc1.weight", {m.experts, 2, m.expert_ffn, h}, TpSplit::kDim, 2).expert = true;
      layer("mlp.experts.fc2.weight", {m.experts, h, m.expert_ffn}, TpSplit::kDim, 2).expert = true;
    } else if (m.swiglu) {
      layer("mlp.fc1.weight", {2, m.ffn, h}, TpSplit::kDim, 1);
      layer("mlp.fc2.weight", {h, m.ffn}, TpSplit::kDim, 1);
    } else {
      layer("mlp.fc1.weight", {m.ffn, h}, TpSplit::kDim, 0);
      if (m.bias) layer("mlp.fc1.bias", {m.ffn}, TpSplit::kDim, 0);
      layer("mlp.fc2.weight", {h, m.ffn}, TpSplit::kDim, 1);
      if (m.bias) layer("mlp.fc2.bias", {h}, TpSplit::kReplicated);
    }
  }
  norm("final_norm", Stage::kPost, -1);
  if (!m.tied_embedding) add("output.weight", {m.vocab, h}, TpSplit::kVocab, 0, Stage::kPost, -1);
  return out;
}

}  // namespace dynatrain::vps
