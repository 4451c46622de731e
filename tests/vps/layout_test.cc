#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "vps/layout.h"

namespace dynatrain::vps {
namespace {

// For every (tensor, kind), counts how many ranks hold each element, by walking every segment.
// Expected: each element held exactly `replicas(kind)` times.
std::map<std::pair<std::uint32_t, int>, std::vector<int>> holder_counts(const Layout& layout) {
  std::map<std::pair<std::uint32_t, int>, std::vector<int>> counts;
  for (int r = 0; r < layout.config().world_size(); ++r) {
    for (const auto& buf : layout.rank_layout(r).buffers) {
      std::int64_t last_end = 0;
      for (const auto& seg : buf.segments) {
        EXPECT_GE(seg.offset, last_end) << "segments overlap in rank " << r;
        last_end = seg.offset + seg.box.numel();
        auto& c = counts[{seg.tensor, static_cast<int>(buf.kind)}];
        const Box full = layout.tensors()[seg.tensor].full_box();
        if (c.empty()) c.assign(full.numel(), 0);
        for (std::int64_t i = 0; i < seg.box.numel(); ++i) ++c[full.linear_index(seg.box.coord_at(i))];
      }
      EXPECT_LE(last_end, buf.numel);
    }
  }
  return counts;
}

// Holders of every element of (tensor, kind), from the rules in layout.h: replicated tensors are
// held by every tp rank; unsharded kinds by every data-parallel replica; tied embeddings twice.
int expected_holders(const Layout& layout, const TensorSpec& t, StateKind kind) {
  const auto& c = layout.config();
  const bool sharded = kind == StateKind::kParam ? c.zero >= 3 : kind == StateKind::kGrad ? c.zero >= 2 : c.zero >= 1;
  int holders = t.expert ? (sharded ? 1 : c.edp()) : (sharded ? 1 : c.dp * c.cp);
  if (t.split == TpSplit::kReplicated) holders *= c.tp;
  if (t.also_on_last_stage && c.pp > 1) holders *= 2;
  return holders;
}

void expect_exact_holders(const ModelSpec& model, const std::string& config_text, std::int64_t bucket_elems) {
  LayoutOptions options;
  options.bucket_elems = bucket_elems;
  Layout layout(model, ParallelConfig::parse(config_text), options);
  auto counts = holder_counts(layout);
  ASSERT_EQ(counts.size(), layout.tensors().size() * kNumStateKinds);
  for (const auto& [key, c] : counts) {
    const auto& t = layout.tensors()[key.first];
    const int want = expected_holders(layout, t, static_cast<StateKind>(key.second));
    for (std::size_t i = 0; i < c.size(); ++i)
      ASSERT_EQ(c[i], want) << t.name << " kind " << key.second << " element " << i << " in " << config_text;
  }
}

TEST(Layout, DenseTpDpZeroOneCoversEveryElement) {
  // tp=2,dp=3: weights replicated over dp (3 holders); zero=1 shards the optimizer (1 holder).
  // Norms are replicated over tp as well (6 holders of weights, 1 of optimizer state).
  expect_exact_holders(model_from_name("tiny-dense"), "tp=2,dp=3,zero=1", 1000);
  expect_exact_holders(model_from_name("tiny-dense"), "tp=4,cp=2,dp=1,pp=2,zero=2", 333);
  ModelSpec gpt_like = model_from_name("gpt3-1.3b");  // biases, LayerNorm, tied, positions
  gpt_like.hidden = 32;
  gpt_like.layers = 3;
  gpt_like.heads = gpt_like.kv_heads = 4;
  gpt_like.head_dim = 8;
  gpt_like.ffn = 64;
  gpt_like.vocab = 100;
  gpt_like.max_positions = 16;
  gpt_like.vocab_divisible_by = 8;
  expect_exact_holders(gpt_like, "tp=2,pp=3,dp=2,zero=1", 300);
}

TEST(Layout, GqaWithTpAboveKvHeadsReplicatesKv) {
  ModelSpec m = model_from_name("tiny-dense");  // 8 heads, 4 kv heads
  Layout layout(m, ParallelConfig::parse("tp=8,dp=1,zero=0"));
  const auto shards = layout.local_shards(3);
  const auto& qkv = *std::find_if(shards.begin(), shards.end(), [&](const LocalShard& s) {
    return layout.tensors()[s.tensor].name == "layers.0.attn.qkv.weight";
  });
  ASSERT_EQ(qkv.boxes.size(), 2u);
  EXPECT_EQ(qkv.boxes[0].str(), "[1:2, 1:2, 0:8, 0:64]");  // rank 3: group 1, q head 1
  EXPECT_EQ(qkv.boxes[1].str(), "[1:2, 2:4, 0:8, 0:64]");  // group 1's k and v
}

TEST(Layout, VocabPaddingStaysLocal) {
  ModelSpec m = model_from_name("tiny-dense");
  m.vocab = 250;
  m.vocab_divisible_by = 16;  // padded to 256 at tp=4 (64 rows each; last rank 58 real rows)
  Layout layout(m, ParallelConfig::parse("tp=4,zero=0"));
  const auto shards = layout.local_shards(3);
  EXPECT_EQ(shards[0].local_shape[0], 64);
  EXPECT_EQ(shards[0].boxes[0].str(), "[192:250, 0:64]");
  EXPECT_EQ(shards[0].numel, 64 * 64);
}

TEST(Layout, MoeExpertsShardOverEpAndEtp) {
  expect_exact_holders(model_from_name("tiny-moe"), "tp=2,dp=2,ep=2,zero=0", 500);
  expect_exact_holders(model_from_name("tiny-moe"), "tp=2,dp=4,ep=2,etp=2,zero=1", 500);
}

TEST(Layout, TiedEmbeddingLivesOnFirstAndLastStage) {
  ModelSpec m = model_from_name("tiny-dense");
  m.tied_embedding = true;
  Layout layout(m, ParallelConfig::parse("pp=2,zero=0"));
  EXPECT_EQ(layout.local_shards(0).front().tensor, 0u);
  EXPECT_EQ(layout.local_shards(1).front().tensor, 0u);
  EXPECT_EQ(layout.tensors()[layout.local_shards(1).back().tensor].name, "final_norm.weight");
}

TEST(Layout, ZeroThreeShardsEveryKind) {
  expect_exact_holders(model_from_name("tiny-dense"), "tp=2,pp=2,dp=2,zero=3", 777);
}

// align_elems = kPageAlignElems: every tensor starts on a page in every buffer of every kind
// (with ZeRO, in every rank's shard too), the holders stay exact, and the default packs.
TEST(Layout, PageAlignedTensorsStartOnPagesInEveryBuffer) {
  for (const char* cfg : {"tp=2,pp=2,dp=2,zero=1", "dp=4,zero=3", "pp=2,dp=2,zero=0"}) {
    LayoutOptions o;
    o.bucket_elems = 5000;
    o.align_elems = kPageAlignElems;
    const Layout layout(model_from_name("tiny-dense"), ParallelConfig::parse(cfg), o);
    for (int r = 0; r < layout.config().world_size(); ++r) {
      for (const auto& s : layout.local_shards(r)) EXPECT_EQ(s.offset % kPageAlignElems, 0) << cfg;
      for (const auto& buf : layout.rank_layout(r).buffers) {
        const std::int64_t page = 4096 / o.elem_bytes[static_cast<int>(buf.kind)];
        std::uint32_t last = ~0u;
        for (const auto& seg : buf.segments) {
          const bool starts_tensor_here =
              seg.tensor != last && seg.box.numel() > 0 && seg.box == layout.tensors()[seg.tensor].full_box();
          if (starts_tensor_here) {
            EXPECT_EQ(seg.offset % page, 0) << cfg << " rank " << r;
          }
          last = seg.tensor;
        }
      }
    }
  }
  LayoutOptions packed;
  packed.bucket_elems = 5000;
  const Layout a(model_from_name("tiny-dense"), ParallelConfig::parse("dp=2"), packed);
  std::int64_t end = 0;
  for (const auto& s : a.local_shards(0)) {
    if (s.bucket == 0) {
      EXPECT_EQ(s.offset, end);
    }
    end = s.offset + s.numel;
  }
  packed.align_elems = 0;
  EXPECT_THROW(Layout(model_from_name("tiny-dense"), ParallelConfig::parse("dp=2"), packed), InputError);
}

// A user's own tensor list (the Python binding's models): the same holder rules apply.
std::vector<TensorSpec> custom_tensors(int layers) {
  std::vector<TensorSpec> t;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, TpSplit split, int dim, Stage stage,
                 std::int64_t layer) {
    // id 99: reassigned by the layout.
    t.push_back({99, std::move(name), std::move(shape), split, static_cast<std::uint8_t>(dim), false, stage, layer});
  };
  add("embed", {100, 16}, TpSplit::kVocab, 0, Stage::kPre, -1);
  for (int l = 0; l < layers; ++l) {
    add("l" + std::to_string(l) + ".norm", {16}, TpSplit::kReplicated, 0, Stage::kLayer, l);
    add("l" + std::to_string(l) + ".up", {32, 16}, TpSplit::kDim, 0, Stage::kLayer, l);
    add("l" + std::to_string(l) + ".down", {16, 32}, TpSplit::kDim, 1, Stage::kLayer, l);
  }
  add("head", {100, 16}, TpSplit::kReplicated, 0, Stage::kPost, -1);
  return t;
}

TEST(Layout, CustomTensorsCoverEveryElement) {
  ModelSpec model;
  model.name = "custom";
  model.layers = 4;
  model.vocab_divisible_by = 8;
  for (const char* cfg : {"tp=2,pp=2,dp=2,zero=1", "tp=4,dp=2,zero=0", "pp=4,zero=3"}) {
    Layout layout(custom_tensors(4), model, ParallelConfig::parse(cfg), LayoutOptions{.bucket_elems = 500});
    ASSERT_EQ(layout.tensors()[3].id, 3u);
    auto counts = holder_counts(layout);
    ASSERT_EQ(counts.size(), layout.tensors().size() * kNumStateKinds) << cfg;
    for (const auto& [key, c] : counts) {
      const auto& t = layout.tensors()[key.first];
      const int want = expected_holders(layout, t, static_cast<StateKind>(key.second));
      for (std::size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], want) << t.name << " element " << i << " in " << cfg;
    }
  }
}

TEST(Layout, CustomTensorsRejectSplitsThatDoNotDivide) {
  ModelSpec model;
  model.name = "custom";
  model.layers = 4;
  auto message = [&](std::vector<TensorSpec> tensors, const char* cfg) -> std::string {
    try {
      Layout(std::move(tensors), model, ParallelConfig::parse(cfg));
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(custom_tensors(4), "tp=3"), "tp=3 does not divide dim 0 (32) of tensor 'l0.up'");
  EXPECT_EQ(message(custom_tensors(4), "pp=8"), "pp=8 exceeds the model's 4 layers; valid pp: 1..4");
  EXPECT_EQ(message(custom_tensors(4), "dp=2,ep=2"),
            "ep=2, etp=1: model 'custom' has no expert tensors; valid: ep=1, etp=1");
  EXPECT_EQ(message(custom_tensors(5), "dp=1"), "tensor 'l4.norm': layer 4 is outside 0..3");
  auto qkv = custom_tensors(4);
  qkv[1].split = TpSplit::kQkv;
  EXPECT_NE(message(qkv, "dp=1").find("fused-QKV"), std::string::npos);
  EXPECT_EQ(message({}, "dp=1"), "model 'custom' has no tensors");
  auto twice = custom_tensors(4);
  twice.push_back(twice[2]);
  EXPECT_EQ(message(twice, "dp=1"),
            "model 'custom' has two tensors named '" + twice[2].name + "'; tensor names must be unique");
}

}  // namespace
}  // namespace dynatrain::vps
