// vps/hf_config.cc (model_from_hf_config): hostile input is refused naming the field, fields that
// would change the tensor set are refused, and so are directories and missing files.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "common/error.h"
#include "vps/model_spec.h"

namespace dynatrain::vps {
namespace {

std::string error_for(const std::string& body) {
  // One file per test: ctest runs each test as its own process, several at once.
  const std::string path = ::testing::TempDir() + "hostile_config_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
  {
    std::ofstream out(path, std::ios::trunc);
    out << body;
  }
  try {
    (void)model_from_hf_config(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const char* kLlama = R"("model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 96)";

TEST(HfConfig, RefusesHostileInputNamingTheField) {
  EXPECT_EQ(error_for(std::string("{") + kLlama + "}"), "");
  EXPECT_NE(error_for("").find("is empty"), std::string::npos);
  EXPECT_NE(error_for("   \n").find("is empty"), std::string::npos);
  EXPECT_NE(error_for("hidden_size: 4").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_for("[1, 2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_for(std::string(100000, '[') + std::string(100000, ']')).find("nests deeper"), std::string::npos);
  EXPECT_NE(error_for(std::string("{") + kLlama + R"(, "tie_word_embeddings": "yes"})")
                .find("tie_word_embeddings must be true or false"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": 5})").find("model_type must be a string"), std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "bert"})").find("model_type 'bert' is not supported"), std::string::npos);
  EXPECT_NE(error_for(R"({"hidden_size": 64})").find("model_type is required"), std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "llama", "hidden_size": -64})").find("hidden_size=-64 is out of range"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "llama", "hidden_size": 64.5})").find("hidden_size must be an integer"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "llama", "hidden_size": 99999999999999999999})").find("hidden_size"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "llama", "hidden_size": 9223372036854775807})").find("out of range"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "llama", "num_hidden_layers": 2})").find("hidden_size is required"),
            std::string::npos);
  EXPECT_NE(error_for(std::string("{") + kLlama + R"(, "num_hidden_layers": 100000})")
                .find("num_hidden_layers=100000 is out of range; valid: 1..4096"),
            std::string::npos);
  // Sizes each in range whose products overflow int64 element counts.
  EXPECT_NE(error_for(R"({"model_type": "mixtral", "hidden_size": 16777216, "num_hidden_layers": 2,
      "num_attention_heads": 1, "vocab_size": 16777216, "intermediate_size": 16777216,
      "num_local_experts": 16777216, "num_experts_per_tok": 1})")
                .find("2^62"),
            std::string::npos);
}

TEST(HfConfig, RefusesFieldsThatChangeTheTensorSet) {
  EXPECT_NE(error_for(std::string("{") + kLlama + R"(, "mlp_bias": true})").find("mlp_bias"), std::string::npos);
  EXPECT_NE(error_for(std::string("{") + kLlama + R"(, "quantization_config": {"quant_method": "fp8"}})")
                .find("quantization_config"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32,
      "vocab_size": 100, "add_cross_attention": true})")
                .find("add_cross_attention"),
            std::string::npos);
  EXPECT_NE(error_for(R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 96, "moe_intermediate_size": 32,
      "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [7]})")
                .find("mlp_only_layers"),
            std::string::npos);
  // attention_bias=true is modelled for Llama (q, k, v and output biases).
  const std::string path = ::testing::TempDir() + "llama_bias.json";
  std::ofstream(path) << "{" << kLlama << R"(, "attention_bias": true})";
  const auto ts = build_tensors(model_from_hf_config(path));
  const auto has = [&](const std::string& name) {
    return std::any_of(ts.begin(), ts.end(), [&](const TensorSpec& t) { return t.name == name; });
  };
  EXPECT_TRUE(has("layers.1.attn.qkv.bias"));
  EXPECT_TRUE(has("layers.1.attn.proj.bias"));
}

TEST(HfConfig, RefusesDirectoriesAndMissingFiles) {
  EXPECT_THROW((void)model_from_hf_config(::testing::TempDir()), InputError);
  EXPECT_THROW((void)model_from_hf_config("/nonexistent/config.json"), InputError);
  try {
    (void)model_from_hf_config(DT_HF_CONFIG_DIR);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos);
  }
}

}  // namespace
}  // namespace dynatrain::vps
