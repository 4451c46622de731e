// Model specs: parameter counts of real Hugging Face configs against the published counts, the
// tensor set of each family (the reader's refusals: hf_config_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/error.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

namespace dynatrain::vps {
namespace {

std::string config_path(const std::string& name) { return std::string(DT_HF_CONFIG_DIR) + "/" + name + ".json"; }

struct Published {
  const char* config;
  std::int64_t params;  // as published (model card, paper or the HF safetensors index)
};

// Published counts. Exact where the model card or checkpoint gives the exact number; DeepSeek-V3
// excludes its multi-token-prediction module (671B main model + 14B MTP), as Hugging Face's
// DeepseekV3ForCausalLM does.
const Published kPublished[] = {
    {"llama-2-7b", 6'738'415'616},
    {"llama-2-70b", 68'976'648'192},
    {"llama-3-8b", 8'030'261'248},
    {"qwen2-7b", 7'615'616'512},
    {"qwen2.5-0.5b", 494'032'768},
    {"qwen1.5-moe-a2.7b", 14'315'784'192},
    {"qwen2-57b-a14b", 57'409'388'544},
    {"qwen3-30b-a3b", 30'532'122'624},
    {"mixtral-8x7b", 46'702'792'704},
    {"deepseek-v2-lite", 15'706'484'224},
    {"deepseek-v2", 235'741'434'880},
    {"deepseek-v3", 671'026'419'200},
    {"gpt2", 124'439'808},
    {"gpt2-medium", 354'823'168},
    {"pythia-1b", 1'011'781'632},
    {"pythia-160m", 162'322'944},
};

TEST(ModelSpec, RealConfigsMatchPublishedParameterCounts) {
  for (const auto& p : kPublished) {
    const ModelSpec m = model_from_hf_config(config_path(p.config));
    const std::int64_t count = parameter_count(m);
    const double rel = std::abs(static_cast<double>(count - p.params)) / static_cast<double>(p.params);
    EXPECT_LT(rel, 1e-3) << p.config << ": modelled " << count << ", published " << p.params;
  }
}

bool has_tensor(const std::vector<TensorSpec>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return true;
  return false;
}

TEST(ModelSpec, FamiliesHaveTheirOwnTensors) {
  const auto qwen2 = build_tensors(model_from_hf_config(config_path("qwen2-7b")));
  EXPECT_TRUE(has_tensor(qwen2, "layers.0.attn.qkv.bias"));
  EXPECT_FALSE(has_tensor(qwen2, "layers.0.attn.proj.bias"));

  const auto qmoe = build_tensors(model_from_hf_config(config_path("qwen2-57b-a14b")));
  EXPECT_TRUE(has_tensor(qmoe, "layers.3.mlp.shared.fc1.weight"));
  EXPECT_TRUE(has_tensor(qmoe, "layers.3.mlp.shared.gate.weight"));

  const ModelSpec v3 = model_from_hf_config(config_path("deepseek-v3"));
  EXPECT_EQ(v3.dense_layers, (std::vector<std::int64_t>{0, 1, 2}));
  const auto v3t = build_tensors(v3);
  EXPECT_TRUE(has_tensor(v3t, "layers.2.mlp.fc1.weight"));
  EXPECT_FALSE(has_tensor(v3t, "layers.2.mlp.router.weight"));
  EXPECT_TRUE(has_tensor(v3t, "layers.3.mlp.router.bias"));
  EXPECT_TRUE(has_tensor(v3t, "layers.3.attn.q_up.weight"));
  EXPECT_FALSE(has_tensor(v3t, "layers.3.attn.qkv.weight"));

  const auto lite = build_tensors(model_from_hf_config(config_path("deepseek-v2-lite")));
  EXPECT_TRUE(has_tensor(lite, "layers.1.attn.q.weight"));     // q_lora_rank null: direct q
  EXPECT_FALSE(has_tensor(lite, "layers.1.mlp.router.bias"));  // greedy routing: no bias

  const auto gpt2 = build_tensors(model_from_hf_config(config_path("gpt2")));
  EXPECT_TRUE(has_tensor(gpt2, "embedding.position.weight"));
  EXPECT_TRUE(has_tensor(gpt2, "layers.0.input_norm.bias"));
  EXPECT_FALSE(has_tensor(gpt2, "output.weight"));  // tied
}

// Every role has a distinct name, every tensor build_tensors makes has a role (never kOther)
// whose name ends the tensor's name, and across the presets and the real configs every role
// occurs: no role is declared that no model builds.
TEST(ModelSpec, EveryTensorRoleMapsToANameAndOccurs) {
  std::set<std::string> names;
  for (int r = 1; r < static_cast<int>(TensorRole::kCount); ++r) {
    const std::string name = tensor_role_name(static_cast<TensorRole>(r));
    EXPECT_FALSE(name.empty()) << "role " << r;
    EXPECT_TRUE(names.insert(name).second) << "two roles named " << name;
  }
  EXPECT_STREQ(tensor_role_name(TensorRole::kOther), "");
  std::vector<ModelSpec> models;
  for (const auto& p : preset_names()) models.push_back(model_from_name(p));
  for (const auto& p : kPublished) models.push_back(model_from_hf_config(config_path(p.config)));
  std::set<TensorRole> seen;
  for (const auto& m : models)
    for (const auto& t : build_tensors(m)) {
      ASSERT_NE(t.role, TensorRole::kOther) << m.name << " " << t.name;
      const std::string prefix = t.stage == Stage::kLayer ? "layers." + std::to_string(t.layer) + "." : "";
      EXPECT_EQ(t.name, prefix + tensor_role_name(t.role)) << m.name;
      EXPECT_EQ(is_norm(t.role), t.name.find("norm") != std::string::npos) << t.name;
      seen.insert(t.role);
    }
  for (int r = 1; r < static_cast<int>(TensorRole::kCount); ++r)
    EXPECT_TRUE(seen.count(static_cast<TensorRole>(r)))
        << "no model builds a " << tensor_role_name(static_cast<TensorRole>(r));
}

TEST(ModelSpec, QwenMoeSparseStepAndMlpOnlyLayers) {
  const std::string path = ::testing::TempDir() + "qwen_step.json";
  std::ofstream(path) << R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 96,
    "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
    "shared_expert_intermediate_size": 0, "decoder_sparse_step": 2, "mlp_only_layers": [3]})";
  const ModelSpec m = model_from_hf_config(path);
  // Sparse when (l + 1) % 2 == 0 and l not in [3]: layers 1 and 5.
  EXPECT_EQ(m.dense_layers, (std::vector<std::int64_t>{0, 2, 3, 4}));
  EXPECT_FALSE(m.shared_expert_gate);
  EXPECT_FALSE(has_tensor(build_tensors(m), "layers.1.mlp.shared.gate.weight"));
}

TEST(ModelSpec, TrainerFeaturesAreListed) {
  EXPECT_TRUE(model_from_name("tiny-dense").features_beyond_llama().empty());
  EXPECT_TRUE(model_from_hf_config(config_path("llama-3-8b")).features_beyond_llama().empty());
  for (const char* name : {"qwen2-7b", "qwen2-57b-a14b", "deepseek-v2-lite", "deepseek-v3", "gpt2", "pythia-1b"})
    EXPECT_FALSE(model_from_hf_config(config_path(name)).features_beyond_llama().empty()) << name;
}

TEST(ModelSpec, SplitsOfNewTensorsDivideOrAreRefused) {
  const ModelSpec lite = model_from_hf_config(config_path("deepseek-v2-lite"));
  ParallelConfig ok = ParallelConfig::parse("tp=4,pp=3,dp=2,ep=8");
  EXPECT_NO_THROW(ok.validate_for(lite));
  ParallelConfig bad = ParallelConfig::parse("tp=3,dp=1");
  EXPECT_THROW(bad.validate_for(lite), InputError);
}

}  // namespace
}  // namespace dynatrain::vps
