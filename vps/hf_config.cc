// Hugging Face config.json -> ModelSpec, one reader per model family.
//
// The reader is strict: a config is parsed only when every field that shapes the tensor set is
// understood. Fields that change the set but are not modelled (quantization_config, mlp_bias,
// add_cross_attention, ...) are refused by name, never ignored. Input is hostile until checked:
// the file must be a regular file of at most kMaxBytes holding one JSON object nested at most
// kMaxDepth deep; every integer lies in [lo, kMaxDim]; booleans and strings have their types.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/json_error.h"
#include "vps/model_spec.h"

namespace dynatrain::vps {

namespace {

constexpr std::uintmax_t kMaxBytes = 1 << 20;
constexpr int kMaxDepth = 32;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr std::int64_t kMaxLayers = 4096;  // the tensor list grows with layers; real models have < 200

using nlohmann::json;

// Deepest bracket nesting outside strings; checked before parsing so the parser never recurses deep.
int nesting_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

json read_json_object(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) DT_INPUT_ERROR("cannot open model config '", path, "'");
  if (!fs::is_regular_file(status))
    DT_INPUT_ERROR("model config '", path, "' is not a regular file; give the path of a config.json");
  const auto size = fs::file_size(path, ec);
  if (ec || size > kMaxBytes)
    DT_INPUT_ERROR("model config '", path, "' has ", size, " bytes; a config.json has at most ", kMaxBytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) DT_INPUT_ERROR("cannot open model config '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string body = text.str();
  if (body.find_first_not_of(" \t\r\n") == std::string::npos)
    DT_INPUT_ERROR("model config '", path, "' is empty; expected a JSON object");
  if (nesting_depth(body) > kMaxDepth)
    DT_INPUT_ERROR("model config '", path, "' nests deeper than ", kMaxDepth, " levels; not a config.json");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    DT_INPUT_ERROR("model config '", path, "' is not valid JSON: ", brief_json_error(e.what()));
  }
  if (!j.is_object()) DT_INPUT_ERROR("model config '", path, "' must be a JSON object, got ", j.type_name());
  return j;
}

// Typed, range-checked access to the fields of one config.
class Fields {
 public:
  Fields(const json& j, const std::string& path) : j_(j), path_(path) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  std::int64_t integer(const char* key, std::int64_t fallback, std::int64_t lo = 1, std::int64_t hi = kMaxDim) const {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    const std::string range = " is out of range; valid: " + std::to_string(lo) + ".." + std::to_string(hi);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
      fail(key, "=" + v.dump() + range);
    const auto x = v.get<std::int64_t>();
    if (x < lo || x > hi) fail(key, "=" + v.dump() + range);
    return x;
  }
  std::int64_t required(const char* key, std::int64_t lo = 1, std::int64_t hi = kMaxDim) const {
    if (!has(key)) fail(key, "is required");
    return integer(key, 0, lo, hi);
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail(key, "must be true or false, got " + j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail(key, "must be a string, got " + j_[key].dump());
    return j_[key].get<std::string>();
  }
  std::vector<std::int64_t> integer_list(const char* key) const {
    if (!has(key)) return {};
    if (!j_[key].is_array()) fail(key, "must be a list of layer indices, got " + j_[key].dump());
    std::vector<std::int64_t> out;
    for (const json& v : j_[key]) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
        fail(key, "must hold non-negative integers, got " + v.dump());
      out.push_back(v.get<std::int64_t>());
    }
    return out;
  }
  // Refuses a field present with a value that would change the tensor set in a way not modelled.
  void refuse_if(bool condition, const char* key, const std::string& why) const {
    if (condition) fail(key, why);
  }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    DT_INPUT_ERROR("model config '", path_, "': ", key, what[0] == '=' ? "" : " ", what);
  }

 private:
  const json& j_;
  const std::string& path_;
};

// Fields that every family refuses: they change dtypes or add tensors nobody here models.
void refuse_common(const Fields& f) {
  f.refuse_if(f.has("quantization_config"), "quantization_config",
              "is set: quantized checkpoints (extra scale tensors, other dtypes) are not modelled; "
              "remove it to model the unquantized weights");
}

// Llama-style attention and dense MLP fields shared by llama, mistral, qwen2/3, mixtral, *_moe.
void read_llama_core(const Fields& f, ModelSpec& m) {
  m.hidden = f.required("hidden_size");
  m.layers = f.required("num_hidden_layers", 1, kMaxLayers);
  m.heads = f.required("num_attention_heads");
  m.kv_heads = f.integer("num_key_value_heads", m.heads);
  m.head_dim = f.integer("head_dim", m.hidden / m.heads);
  m.vocab = f.required("vocab_size");
  m.tied_embedding = f.boolean("tie_word_embeddings", false);
  if (f.boolean("attention_bias", false)) m.qkv_bias = m.proj_bias = true;
  f.refuse_if(f.boolean("mlp_bias", false), "mlp_bias", "=true (biases on the MLP) is not modelled");
}

// Qwen-MoE's layer rule: layer l is sparse unless listed in mlp_only_layers or
// (l + 1) % decoder_sparse_step != 0.
void read_qwen_moe_layers(const Fields& f, ModelSpec& m) {
  const std::int64_t step = f.integer("decoder_sparse_step", 1);
  auto only = f.integer_list("mlp_only_layers");
  for (auto l : only)
    if (l >= m.layers)
      f.fail("mlp_only_layers", "names layer " + std::to_string(l) + "; valid: 0.." + std::to_string(m.layers - 1));
  const std::set<std::int64_t> dense_only(only.begin(), only.end());
  for (std::int64_t l = 0; l < m.layers; ++l)
    if (dense_only.count(l) || (l + 1) % step != 0) m.dense_layers.push_back(l);
}

void read_moe(const Fields& f, ModelSpec& m, const char* experts_key, const char* ffn_key) {
  m.experts = f.required(experts_key);
  m.top_k = f.required("num_experts_per_tok");
  m.expert_ffn = f.required(ffn_key);
}

// DeepSeek V2 / V3: multi-head latent attention, and MoE layers when n_routed_experts is set.
void read_deepseek(const Fields& f, ModelSpec& m, const std::string& type) {
  m.hidden = f.required("hidden_size");
  m.layers = f.required("num_hidden_layers", 1, kMaxLayers);
  m.heads = m.kv_heads = f.required("num_attention_heads");
  m.vocab = f.required("vocab_size");
  m.tied_embedding = f.boolean("tie_word_embeddings", false);
  f.refuse_if(f.boolean("attention_bias", false), "attention_bias", "=true is not modelled for MLA");
  m.q_lora_rank = f.integer("q_lora_rank", 0, 0);
  m.kv_lora_rank = f.required("kv_lora_rank");
  m.qk_nope_dim = f.required("qk_nope_head_dim");
  m.qk_rope_dim = f.required("qk_rope_head_dim");
  m.v_head_dim = f.required("v_head_dim");
  m.head_dim = m.qk_nope_dim + m.qk_rope_dim;
  m.ffn = f.required("intermediate_size");
  if (f.has("n_routed_experts")) {
    read_moe(f, m, "n_routed_experts", "moe_intermediate_size");
    m.shared_expert_ffn = f.integer("n_shared_experts", 0, 0) * m.expert_ffn;
    const std::int64_t first_dense = f.integer("first_k_dense_replace", 0, 0);
    const std::int64_t freq = f.integer("moe_layer_freq", 1);
    for (std::int64_t l = 0; l < m.layers; ++l)
      if (l < first_dense || l % freq != 0) m.dense_layers.push_back(l);
    const std::string method = f.string("topk_method", type == "deepseek_v3" ? "noaux_tc" : "greedy");
    m.router_bias = method == "noaux_tc";
  }
}

// GPT-2 (its own key names): LayerNorm, biases, a plain MLP (no SwiGLU), tied embedding by default.
void read_gpt2(const Fields& f, ModelSpec& m) {
  m.hidden = f.required("n_embd");
  m.layers = f.required("n_layer", 1, kMaxLayers);
  m.heads = m.kv_heads = f.required("n_head");
  m.head_dim = m.hidden / m.heads;
  m.ffn = f.integer("n_inner", 4 * m.hidden);
  m.vocab = f.required("vocab_size");
  m.max_positions = f.required("n_positions");
  m.tied_embedding = f.boolean("tie_word_embeddings", true);
  f.refuse_if(f.boolean("add_cross_attention", false), "add_cross_attention",
              "=true (cross-attention layers) is not modelled");
  m.swiglu = false;
  m.bias = m.layernorm = true;
}

// GPT-NeoX: LayerNorm, biases, a plain MLP (no SwiGLU); attention without biases is refused.
void read_gpt_neox(const Fields& f, ModelSpec& m) {
  m.hidden = f.required("hidden_size");
  m.layers = f.required("num_hidden_layers", 1, kMaxLayers);
  m.heads = m.kv_heads = f.required("num_attention_heads");
  m.head_dim = m.hidden / m.heads;
  m.ffn = f.required("intermediate_size");
  m.vocab = f.required("vocab_size");
  m.tied_embedding = f.boolean("tie_word_embeddings", false);
  f.refuse_if(!f.boolean("attention_bias", true), "attention_bias",
              "=false (GPT-NeoX without attention biases) is not modelled");
  m.swiglu = false;
  m.bias = m.layernorm = true;
}

ModelSpec read_family(const Fields& f, const std::string& type) {
  ModelSpec m;
  m.family = type;
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3") {
    read_llama_core(f, m);
    m.ffn = f.required("intermediate_size");
    if (type == "qwen2") m.qkv_bias = true;
    if (type == "qwen3") m.qk_norm = true;
  } else if (type == "mixtral") {
    read_llama_core(f, m);
    read_moe(f, m, "num_local_experts", "intermediate_size");
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    read_llama_core(f, m);
    read_moe(f, m, "num_experts", "moe_intermediate_size");
    read_qwen_moe_layers(f, m);
    if (!m.dense_layers.empty()) m.ffn = f.required("intermediate_size");
    if (type == "qwen2_moe") {
      m.qkv_bias = true;
      m.shared_expert_ffn = f.integer("shared_expert_intermediate_size", 0, 0);
      m.shared_expert_gate = m.shared_expert_ffn > 0;
    } else {
      m.qk_norm = true;
    }
  } else if (type == "deepseek_v2" || type == "deepseek_v3") {
    read_deepseek(f, m, type);
  } else if (type == "gpt2") {
    read_gpt2(f, m);
  } else if (type == "gpt_neox") {
    read_gpt_neox(f, m);
  } else {
    f.fail("model_type", (type.empty() ? std::string("is required") : "'" + type + "' is not supported") +
                             "; valid: llama, mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, mixtral, "
                             "deepseek_v2, deepseek_v3, gpt2, gpt_neox");
  }
  return m;
}

}  // namespace

ModelSpec model_from_hf_config(const std::string& path) {
  const json j = read_json_object(path);
  const Fields f(j, path);
  refuse_common(f);
  ModelSpec m = read_family(f, f.string("model_type", ""));
  m.name = path;
  m.validate();
  (void)build_tensors(m);  // refuses sizes whose element counts overflow
  return m;
}

}  // namespace dynatrain::vps
