// ckpt/hf_export.h: a checkpoint exported under Hugging Face names, values read back from the
// safetensors file against the content oracle; every tensor of the other families named and
// covering its VPS tensor.
#include "ckpt/hf_export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "ckpt/safetensors.h"
#include "common/error.h"
#include "testing/fill.h"
#include "tests/ckpt/ckpt_fixture.h"

namespace dynatrain::ckpt {
namespace {

TEST(Export, HuggingFaceNamesAndValues) {
  const auto a = layout("tiny-moe", "tp=2,pp=2,ep=2");
  const std::string dir = fresh_dir("export");
  save_filled(dir, 1, a);
  const std::string out = dir + "/hf";
  const auto stats = export_hf(open_latest(dir, a.model()), a.model(), out);
  File f = File::open_read(out + "/model.safetensors");
  const StHeader h = read_header(f.fd(), f.size(), f.path());
  EXPECT_EQ(static_cast<std::int64_t>(h.entries.size()), stats.tensors);
  std::map<std::string, StEntry> by_name;
  for (const auto& e : h.entries) by_name[e.name] = e;
  // k_proj of layer 1: rows of the qkv tensor's k head of each group, in group order.
  const StEntry& k = by_name.at("model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<std::int64_t>{4 * 8, 64}));  // 4 groups x head_dim 8, hidden 64
  std::vector<std::uint16_t> data((k.end - k.begin) / 2);      // param is bf16: low 2 bytes of the word
  read_exact(f.fd(), data.data(), k.end - k.begin, h.data_start + k.begin, f.path());
  const auto& qkv = *std::find_if(a.tensors().begin(), a.tensors().end(),
                                  [](const vps::TensorSpec& t) { return t.name == "layers.1.attn.qkv.weight"; });
  const std::int64_t g = 3, row = 5, col = 7;                         // group 3, row 5 of its k head, column 7
  const std::int64_t vps_index = ((g * 4 + 2) * 8 + row) * 64 + col;  // [g, q_per_group + 2 = 4, 8, 64]
  EXPECT_EQ(data[(g * 8 + row) * 64 + col],
            static_cast<std::uint16_t>(testing::fill_word(qkv.id, vps::StateKind::kParam, vps_index)));
  EXPECT_TRUE(by_name.count("model.layers.3.mlp.experts.7.down_proj.weight"));
  EXPECT_TRUE(by_name.count("lm_head.weight"));
  EXPECT_THROW((void)hf_tensors(vps::model_from_name("gpt3-1.3b")), InputError);
  // Every tensor of the other families has a Hugging Face name and covers its VPS tensor.
  vps::ModelSpec qwen2_moe = vps::model_from_name("tiny-moe");
  qwen2_moe.family = "qwen2_moe", qwen2_moe.qk_norm = false, qwen2_moe.qkv_bias = true;
  qwen2_moe.shared_expert_ffn = 16, qwen2_moe.shared_expert_gate = true;
  for (const auto& m : {tiny_deepseek(), qwen2_moe}) {
    std::map<std::string, std::int64_t> covered;  // VPS tensor -> elements exported
    std::set<std::string> names;
    const auto tensors = vps::build_tensors(m);
    for (const auto& t : hf_tensors(m)) {
      std::int64_t n = 1;
      for (auto d : t.shape) n *= d;
      EXPECT_EQ(n, t.box.numel()) << t.name;
      covered[tensors[t.vps_tensor].name] += n;
      EXPECT_TRUE(names.insert(t.name).second) << "twice: " << t.name;
    }
    for (const auto& t : tensors) EXPECT_EQ(covered[t.name], t.numel()) << m.family << " " << t.name;
  }
  EXPECT_TRUE(hf_tensors(tiny_deepseek()).size() > 0);
}

}  // namespace
}  // namespace dynatrain::ckpt
