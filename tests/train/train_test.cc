// Proof of the reference trainer, ranks as threads of one process (inproc transport):
//   1. every parallel dimension's forward and backward matches a single-process reference
//      (logits and gradients, fp32 tolerance), and so does the ZeRO-1 distributed Adam step;
//   2. a switch moves every weight and optimizer element bit for bit (gathered in VPS
//      coordinates before and after), by the engine and by the gather reference path;
//   3. with a switch every 10 steps over 60 steps (TP, PP, DP resize, EP, hybrid) the loss
//      tracks the static run within the reduction-order noise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "comm/inproc/inproc_transport.h"
#include "common/error.h"
#include "exec/pool_allocator.h"
#include "train/bf16.h"
#include "train/data.h"
#include "train/state.h"
#include "job/train_job.h"
#include "train/trainer.h"

namespace dynatrain::train {
using job::parse_schedule;
namespace {

using vps::StateKind;

// Presets, plus tiny versions of the Qwen2-MoE and DeepSeek MoE shapes: "tiny-qwen2-moe" (a
// shared expert with its sigmoid gate in every MoE layer) and "tiny-deepseek-moe" (a shared
// expert without gate, layer 0 dense as with first_k_dense_replace = 1); "tiny-qwen2" (dense
// with q/k/v biases; tiny-qwen2-moe has them too); "tiny-mla" (dense, MLA
// attention with queries projected directly) and "tiny-deepseek-v2" (tiny-deepseek-moe with MLA
// and a q_lora_rank).
vps::ModelSpec with_mla(vps::ModelSpec m, std::int64_t q_lora_rank) {
  m.kv_heads = m.heads;
  m.q_lora_rank = q_lora_rank;
  m.kv_lora_rank = 16;
  m.qk_nope_dim = 8;
  m.qk_rope_dim = 4;
  m.head_dim = 12;
  m.v_head_dim = 6;
  return m;
}

vps::ModelSpec test_model(const std::string& name) {
  if (name == "tiny-qwen2") {
    auto m = vps::model_from_name("tiny-dense");
    m.name = name;
    m.qkv_bias = true;
    return m;
  }
  if (name == "tiny-mla") {
    auto m = with_mla(vps::model_from_name("tiny-dense"), 0);
    m.name = name;
    return m;
  }
  if (name == "tiny-deepseek-v2") {
    auto m = with_mla(test_model("tiny-deepseek-moe"), 24);
    m.name = name;
    return m;
  }
  if (name == "tiny-qwen2-moe" || name == "tiny-deepseek-moe") {
    auto m = vps::model_from_name("tiny-moe");
    m.name = name;
    m.shared_expert_ffn = 48;
    m.shared_expert_gate = name == "tiny-qwen2-moe";
    m.qkv_bias = name == "tiny-qwen2-moe";  // Qwen2-MoE has q/k/v biases
    if (name == "tiny-deepseek-moe") {
      m.shared_expert_ffn = 64;
      m.ffn = 128;
      m.dense_layers = {0};
    }
    return m;
  }
  return vps::model_from_name(name);
}

TrainerOptions tiny(const std::string& model, std::int64_t batch = 8, std::int64_t seq = 16) {
  TrainerOptions o;
  o.model = test_model(model);
  o.global_batch = batch;
  o.seq = seq;
  o.warmup_steps = 5;
  return o;
}

vps::ParallelConfig cfg(const std::string& s) { return vps::ParallelConfig::parse(s); }

struct ProbeResult {
  double loss = 0;
  std::vector<float> logits;
  std::vector<std::vector<float>> grads;
};

ProbeResult probe(const TrainerOptions& o, const std::string& config) {
  ProbeResult out;
  const auto c = cfg(config);
  comm::run_ranks(c.world_size(), [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, c, world, embedded_text());
    auto p = t.forward_backward();
    auto g = t.gather(StateKind::kGrad);
    if (world.rank() == 0) {
      EXPECT_EQ(g.uncovered, 0);
      EXPECT_EQ(g.replica_mismatches, 0) << "replicated gradients differ in " << config;
      out.loss = p.loss;
      out.logits = std::move(p.logits);
      out.grads = std::move(g.tensors);
    }
  });
  return out;
}

// max |a - b| <= atol + rtol * max |b| over the whole vector.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  EXPECT_LE(diff, atol + rtol * scale) << what << ": max diff " << diff << ", max |ref| " << scale;
}

void expect_matches_reference(const std::string& model, const std::string& config) {
  const auto o = tiny(model);
  const auto ref = probe(o, "dp=1");
  const auto got = probe(o, config);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::abs(ref.loss)) << config;
  expect_close(got.logits, ref.logits, 1e-5, 1e-6, config + " logits");
  const auto tensors = vps::build_tensors(o.model);
  ASSERT_EQ(got.grads.size(), tensors.size());
  for (const auto& t : tensors)
    expect_close(got.grads[t.id], ref.grads[t.id], 1e-4, 1e-9, config + " grad " + t.name);
}

// ---- 1. forward and backward against a single-process reference ----
class DenseMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(DenseMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-dense", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, DenseMatchesReference,
                         ::testing::Values("tp=2", "tp=4", "tp=8", "dp=2,zero=0", "dp=4", "pp=2",
                                           "pp=4", "tp=2,pp=2,dp=2", "dp=4,zero=2", "tp=2,dp=2,zero=3",
                                           "pp=2,dp=2,zero=3", "cp=2", "cp=4", "tp=2,cp=2,zero=3",
                                           "pp=2,cp=2,zero=0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (ch == ',' || ch == '=') ch = '_';
                           return s;
                         });

class MoeMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-moe", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, MoeMatchesReference,
                         ::testing::Values("dp=2,ep=2", "dp=4,ep=4", "tp=2,ep=2", "tp=2,dp=2,ep=4",
                                           "tp=4", "pp=2,dp=2,ep=2", "dp=4,ep=2,zero=2",
                                           "tp=2,dp=2,ep=2,zero=3", "tp=2,etp=2", "tp=4,etp=2",
                                           "tp=2,dp=2,ep=2,etp=2", "tp=4,etp=4,zero=3", "cp=2,ep=2",
                                           "tp=2,cp=2,ep=2,etp=2,zero=2"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (ch == ',' || ch == '=') ch = '_';
                           return s;
                         });

// A vocabulary of 256 padded to a multiple of 128 * tp (Megatron's padding): at tp=3 the last
// rank, at tp=4 the last two hold only padding rows of the embedding and output layer. They
// contribute zeros to the embedding and -inf / 0 to the cross-entropy's max and sums, and take
// part in every collective (tests/train/vocab_padding_llama.json is the same model for mpirun).
TrainerOptions padded_vocab() {
  auto o = tiny("tiny-dense");
  o.model.name = "tiny-dense-padded-vocab";
  o.model.hidden = 96;
  o.model.heads = o.model.kv_heads = 12;
  o.model.head_dim = 8;
  o.model.ffn = 192;
  o.model.vocab_divisible_by = 128;
  return o;
}

TEST(Train, RanksHoldingOnlyVocabPaddingMatchReference) {
  const auto o = padded_vocab();
  const auto ref = probe(o, "dp=1");
  const auto tensors = vps::build_tensors(o.model);
  for (const std::string config : {"tp=3", "tp=4", "tp=4,zero=3"}) {
    const auto got = probe(o, config);
    EXPECT_NEAR(got.loss, ref.loss, 1e-5 * std::abs(ref.loss)) << config;
    expect_close(got.logits, ref.logits, 1e-5, 1e-6, config + " logits");
    for (const auto& t : tensors)
      expect_close(got.grads[t.id], ref.grads[t.id], 1e-4, 1e-9, config + " grad " + t.name);
  }
}

class SharedExpertMoeMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(SharedExpertMoeMatchesReference, LogitsAndGradients) {
  for (const std::string model : {"tiny-qwen2-moe", "tiny-deepseek-moe", "tiny-deepseek-v2"})
    expect_matches_reference(model, GetParam());
}

// Qwen2's q/k/v biases, including tp > kv heads (the k/v bias rows shared by tp ranks).
class QkvBiasMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(QkvBiasMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-qwen2", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, QkvBiasMatchesReference, ::testing::Values("tp=2,dp=2,zero=2", "tp=8"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (ch == ',' || ch == '=') ch = '_';
                           return s;
                         });

class MlaMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(MlaMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-mla", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, MlaMatchesReference,
                         ::testing::Values("tp=2", "tp=8", "tp=2,dp=2,zero=3", "pp=2,dp=2,zero=2", "tp=2,cp=2"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (ch == ',' || ch == '=') ch = '_';
                           return s;
                         });
INSTANTIATE_TEST_SUITE_P(Train, SharedExpertMoeMatchesReference,
                         ::testing::Values("tp=2,ep=2", "dp=2,ep=2,zero=3", "tp=2,dp=2,ep=2,etp=2",
                                           "pp=2,dp=2,ep=2"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (ch == ',' || ch == '=') ch = '_';
                           return s;
                         });

// The distributed Adam (ZeRO-1 reduce-scatter / shard update / all-gather) against ZeRO-0 on
// one rank: params and optimizer state after 3 steps.
std::vector<std::vector<std::vector<float>>> state_after(const TrainerOptions& o, const std::string& config,
                                                         int steps, std::vector<double>* losses = nullptr) {
  std::vector<std::vector<std::vector<float>>> out;
  const auto c = cfg(config);
  comm::run_ranks(c.world_size(), [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, c, world, embedded_text());
    for (int i = 0; i < steps; ++i) {
      auto st = t.step();
      if (world.rank() == 0 && losses) losses->push_back(st.loss);
    }
    for (StateKind k : {StateKind::kParam, StateKind::kMaster, StateKind::kExpAvg, StateKind::kExpAvgSq}) {
      auto g = t.gather(k);
      if (world.rank() == 0) {
        EXPECT_EQ(g.uncovered, 0);
        EXPECT_EQ(g.replica_mismatches, 0) << vps::state_kind_name(k) << " replicas differ in " << config;
        out.push_back(std::move(g.tensors));
      }
    }
  });
  return out;
}

TEST(Train, DistributedAdamMatchesReference) {
  for (const std::string model : {"tiny-dense", "tiny-moe"}) {
    const auto o = tiny(model);
    const auto ref = state_after(o, "dp=1,zero=0", 3);
    for (const std::string config : {"dp=4,zero=1", "tp=2,dp=2,zero=1", "dp=2,zero=0", "dp=4,zero=2",
                                     "tp=2,dp=2,zero=3", "dp=1,zero=3"}) {
      std::string c = config;
      if (model == "tiny-moe" && config.rfind("dp=1", 0) != 0) c += ",ep=2";
      const auto got = state_after(o, c, 3);
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t k = 0; k < got.size(); ++k)
        for (std::size_t t = 0; t < got[k].size(); ++t)
          expect_close(got[k][t], ref[k][t], 2e-3, 1e-7, model + " " + c + " kind " + std::to_string(k) + " tensor " + std::to_string(t));
    }
  }
}

// ---- 2. a switch is lossless, bit for bit ----
struct SwitchCase {
  std::string model, from, to;
  int world;
  SwitchMethod method;
  bool bf16 = false;  // --bf16: bf16 params (2-byte elements) beside the fp32 master
};

void PrintTo(const SwitchCase& c, std::ostream* os) {
  *os << c.model << " " << c.from << " -> " << c.to << " (" << switch_method_name(c.method)
      << (c.bf16 ? ", bf16" : "") << ")";
}

class SwitchIsLossless : public ::testing::TestWithParam<SwitchCase> {};

TEST_P(SwitchIsLossless, BitEqualInVpsCoordinates) {
  const auto& p = GetParam();
  const auto o = tiny(p.model);
  auto options = o;
  options.switch_method = p.method;
  options.bf16 = p.bf16;
  comm::run_ranks(p.world, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(options, cfg(p.from), world, embedded_text());
    for (int i = 0; i < 2; ++i)
      if (t.active()) t.step();
    const std::vector<StateKind> kinds = {StateKind::kParam, StateKind::kMaster, StateKind::kExpAvg,
                                          StateKind::kExpAvgSq};
    std::vector<Gathered> before;
    for (auto k : kinds) before.push_back(t.gather(k));
    const auto stats = t.switch_to(cfg(p.to));
    EXPECT_EQ(t.steps_done(), 2);
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      auto after = t.gather(kinds[i]);
      if (world.rank() != 0) continue;
      EXPECT_EQ(after.uncovered, 0);
      EXPECT_EQ(after.replica_mismatches, 0);
      ASSERT_EQ(after.tensors.size(), before[i].tensors.size());
      std::int64_t differ = 0;
      for (std::size_t ti = 0; ti < after.tensors.size(); ++ti) {
        const auto& a = after.tensors[ti];
        const auto& b = before[i].tensors[ti];
        ASSERT_EQ(a.size(), b.size());
        if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) ++differ;
      }
      EXPECT_EQ(differ, 0) << vps::state_kind_name(kinds[i]) << ": tensors not bit-equal after "
                           << p.from << " -> " << p.to;
    }
    if (world.rank() == 0) {
      EXPECT_GT(stats.total_s, 0.0);
    }
    if (t.active()) {
      auto st = t.step();
      EXPECT_TRUE(std::isfinite(st.loss));
    }
    t.finish();
  });
}

std::vector<SwitchCase> switch_cases() {
  std::vector<SwitchCase> cases;
  for (SwitchMethod m : {SwitchMethod::kEngine, SwitchMethod::kGather}) {
    if (m == SwitchMethod::kEngine && default_switch_method() != SwitchMethod::kEngine) continue;
    cases.push_back({"tiny-dense", "tp=2,pp=2,dp=2", "tp=4,dp=2", 8, m});
    cases.push_back({"tiny-dense", "dp=4,zero=1", "tp=2,pp=2", 4, m});
    cases.push_back({"tiny-dense", "tp=2,dp=2", "dp=1", 4, m});
    cases.push_back({"tiny-dense", "pp=2", "tp=8,zero=0", 8, m});
    cases.push_back({"tiny-moe", "dp=2,ep=2", "tp=2,dp=2,ep=4", 4, m});
    cases.push_back({"tiny-moe", "pp=2,dp=2,ep=2", "dp=4,ep=2,zero=0", 4, m});
    // Across ZeRO stages: sharded grads (2) and sharded params (3) in and out.
    cases.push_back({"tiny-dense", "dp=2,zero=1", "dp=2,zero=3", 4, m});
    cases.push_back({"tiny-dense", "dp=2,zero=3", "tp=2,zero=2", 4, m});
    cases.push_back({"tiny-dense", "tp=2,dp=2,zero=2", "dp=4,zero=0", 4, m});
    cases.push_back({"tiny-moe", "dp=4,ep=2,zero=3", "tp=2,dp=2,ep=4,zero=2", 4, m});
    // Shared experts (+ gate) and a dense first layer.
    cases.push_back({"tiny-qwen2-moe", "tp=2,dp=2,ep=2,etp=2", "pp=2,dp=2,ep=2,zero=3", 4, m});
    cases.push_back({"tiny-deepseek-moe", "pp=2,dp=2,ep=2", "tp=4,ep=2,zero=2", 4, m});
    // MLA.
    cases.push_back({"tiny-deepseek-v2", "tp=2,dp=2,ep=2,etp=2,zero=3", "pp=2,dp=2,ep=2", 4, m});
    // Context parallel in and out.
    cases.push_back({"tiny-dense", "tp=2,cp=2", "cp=2,dp=2,zero=3", 4, m});
    cases.push_back({"tiny-moe", "cp=2,dp=2,ep=4", "tp=2,cp=2,ep=2,zero=2", 4, m});
    // Expert TP in and out.
    cases.push_back({"tiny-moe", "tp=2,dp=2,ep=2,etp=2", "tp=4,etp=4", 4, m});
    cases.push_back({"tiny-moe", "dp=4,ep=4", "tp=2,dp=2,etp=2,zero=2", 4, m});
    // --bf16: the bf16 params and the fp32 master move by their own element sizes, through
    // every ZeRO stage (ZeRO-3 shards the bf16 params), TP, PP, EP, expert TP, CP and MLA.
    cases.push_back({"tiny-dense", "tp=2,pp=2,dp=2", "tp=4,dp=2,zero=0", 8, m, true});
    cases.push_back({"tiny-dense", "dp=2,zero=3", "tp=2,cp=2,zero=2", 4, m, true});
    cases.push_back({"tiny-moe", "dp=4,ep=2,zero=3", "tp=2,dp=2,ep=2,etp=2", 4, m, true});
    cases.push_back({"tiny-deepseek-v2", "pp=2,dp=2,ep=2", "tp=2,dp=2,ep=2,zero=3", 4, m, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Train, SwitchIsLossless, ::testing::ValuesIn(switch_cases()),
                         [](const auto& info) {
                           std::string s = info.param.model + "_" + info.param.from + "_to_" + info.param.to + "_" +
                                           switch_method_name(info.param.method) + (info.param.bf16 ? "_bf16" : "");
                           for (auto& ch : s) if (ch == ',' || ch == '=' || ch == '-') ch = '_';
                           return s;
                         });

// ---- 3. loss of a switching run tracks the static run ----
std::vector<double> losses(const TrainerOptions& o, int world_size,
                           const std::vector<std::pair<int, std::string>>& schedule, int steps) {
  std::vector<double> out;
  comm::run_ranks(world_size, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg(schedule[0].second), world, embedded_text());
    std::size_t next = 1;
    for (int s = 0; s < steps; ++s) {
      if (next < schedule.size() && schedule[next].first == s) t.switch_to(cfg(schedule[next++].second));
      if (!t.active()) continue;
      auto st = t.step();
      if (world.rank() == 0) out.push_back(st.loss);
    }
    t.finish();
  });
  return out;
}

// Tolerance. A switching run and the static run differ only in the order of floating-point
// reductions (tp all-reduces, dp reduce-scatters, matmuls of other shapes), never in the data,
// the init or the optimizer state, so the loss gap must stay at the level of that noise.
// Measured over 60 steps (loss 5.5 -> 2.6): dense, switching vs static 7e-7 and static vs
// static in another layout 1e-6; MoE 3.4e-4 for both (a near-tie in the top-k router flips for
// a token or two). Floors: dense 1e-4, MoE 2e-3 -- ~100x and ~6x the noise, and 2000x /
// 100x below the 0.24 gap of a switch that loses the Adam moments (the fault-injection run).
double loss_tolerance(const std::string& model) { return test_model(model).is_moe() ? 2e-3 : 1e-4; }

// The noise itself depends on the machine: OpenBLAS's kernels (chosen by core type) and its
// thread count change the summation order, and bf16 rounding and router near-ties amplify it.
// Static vs static, MoE over 60 steps fp32: 3.4e-4 by default on one AMD EPYC, 2.6e-5 with
// OPENBLAS_NUM_THREADS=1, 5.1e-3 with OPENBLAS_CORETYPE=Zen or 2 threads each; bf16 MoE over 16
// steps: 3.8e-3, or 2.9e-2 (the switching run then 2.7e-2, past a fixed 1e-2); the bf16 dense
// run 3.0e-3 on another EPYC against 4e-4 here. So a test that runs the static
// run in a second layout takes its tolerance from that run's own noise: kNoiseFactor times the
// largest gap between the two static runs, never below the floor. The switching run crosses
// several layouts, the second static run one: its gap was measured at 0.8x-1.0x the static
// runs' own (dense and MoE, fp32 and bf16), hence a factor of 2. The measured noise must itself
// stay below kMaxNoise, so a broken second run cannot buy a tolerance that hides a fault (2 x
// 0.04 is still 3x below the smallest lost-moments gap, 0.24).
constexpr double kNoiseFactor = 2.0;
constexpr double kMaxNoise = 0.04;
double tracking_tolerance(double floor, double noise) { return std::max(floor, kNoiseFactor * noise); }

void expect_tracks(const std::string& model, const std::vector<std::pair<int, std::string>>& schedule,
                   int world_size, bool check_fault = false, int steps = 60, bool bf16 = false,
                   double tolerance = 0) {
  auto o = tiny(model, 8, 32);
  o.bf16 = bf16;
  const auto stat = losses(o, world_size, {schedule[0]}, steps);
  const auto other = losses(o, world_size, {schedule[1].second.empty() ? schedule[0] : std::pair{0, schedule[1].second}}, steps);
  const auto dyn = losses(o, world_size, schedule, steps);
  ASSERT_EQ(stat.size(), static_cast<std::size_t>(steps));
  ASSERT_EQ(dyn.size(), static_cast<std::size_t>(steps));
  double noise = 0, worst = 0;
  for (int i = 0; i < steps; ++i) noise = std::max(noise, std::abs(other[i] - stat[i]));
  EXPECT_LT(noise, kMaxNoise) << "static runs in two layouts drift apart: not reduction-order noise";
  const double kLossTolerance = tracking_tolerance(tolerance > 0 ? tolerance : loss_tolerance(model), noise);
  for (int i = 0; i < steps; ++i) {
    worst = std::max(worst, std::abs(dyn[i] - stat[i]));
    EXPECT_NEAR(dyn[i], stat[i], kLossTolerance) << "step " << i;
  }
  EXPECT_LT(stat.back(), stat.front() - (steps >= 60 ? 0.5 : 0.2)) << "the model should learn";
  double fault_worst = 0;
  if (check_fault) {  // negative control: a switch that loses the Adam moments must be caught
    auto faulty = o;
    faulty.fault_drop_moments_on_switch = true;
    const auto bad = losses(faulty, world_size, schedule, steps);
    for (int i = 0; i < steps; ++i) fault_worst = std::max(fault_worst, std::abs(bad[i] - stat[i]));
    EXPECT_GT(fault_worst, 5 * kLossTolerance) << "the tolerance would not catch lost optimizer state";
  }
  std::printf("[ loss    ] %s%s: first %.4f last %.4f; max |switching - static| %.2e, "
              "static-vs-static (other layout) %.2e, tolerance %.1e, lost-moments fault %.2e\n",
              model.c_str(), bf16 ? " (bf16)" : "", stat.front(), stat.back(), worst, noise, kLossTolerance, fault_worst);
}

TEST(Train, DenseLossTracksStaticRunWithSwitchEvery10Steps) {
  expect_tracks("tiny-dense",
                {{0, "tp=2,dp=2"},       // TP x DP
                 {10, "pp=2,dp=2"},      // TP -> PP
                 {20, "dp=4"},           // DP resize 2 -> 4
                 {30, "tp=2,pp=2"},      // hybrid
                 {40, "dp=2,zero=0"},    // shrink: two ranks wait; ZeRO-1 -> ZeRO-0
                 {50, "tp=4"}},          // grow back, TP = kv heads
                4, /*check_fault=*/true);
}

TEST(Train, MoeLossTracksStaticRunWithSwitchEvery10Steps) {
  expect_tracks("tiny-moe",
                {{0, "dp=2,ep=2"},
                 {10, "dp=4,ep=4"},         // EP 2 -> 4, DP resize
                 {20, "tp=2,dp=2,ep=2"},    // hybrid TP + EP
                 {30, "pp=2,dp=2,ep=2"},    // PP
                 {40, "dp=1"},              // everything on one rank
                 {50, "tp=2,dp=2,ep=4"}},
                4);
}

// ---- 4. prepare / commit (the elastic device manager, edm/) ----
// A switch prepared two steps ahead (plan, communicators and pool prefault on the EDM's thread
// while steps run), then a switch back: the second commit creates no communicator; on every
// rank the pool's live peak stays within max(source, destination) + budget; the loss tracks the
// static run. (Fresh memory a commit still takes, from fragments too small to reuse, is
// printed, not asserted: see docs/edm.md.)
// Expert TP and context parallel have groups of their own (etp, dp x cp): they come from the
// EDM's cache like every other group, so a layout switched back to creates none in its commit.
// (Fixed placement: an auto placement that reorders the world adds the new world's own two
// communicators in the prepare, which this test does not count.)
TEST(Train, ExpertTpAndContextParallelGroupsComeFromTheCache) {
  auto o = tiny("tiny-moe", 8, 16);
  o.placement = TrainerOptions::Placement::kFixed;
  std::vector<SwitchStats> sws;
  const std::vector<std::string> to = {"tp=2,dp=2,ep=2,etp=2", "dp=4,ep=2", "tp=2,dp=2,ep=2,etp=2", "cp=2,dp=2,ep=2"};
  comm::run_ranks(4, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg("dp=4,ep=2"), world, embedded_text());
    for (std::size_t i = 0; i < to.size(); ++i) {
      t.prepare(cfg(to[i]));
      auto sw = t.commit();
      if (world.rank() == 0) sws.push_back(sw);
      t.step();
    }
    t.finish();
  });
  ASSERT_EQ(sws.size(), 4u);
  EXPECT_EQ(sws[0].comm_creations, 8u) << "a new layout with etp > 1: 7 groups and the etp group";
  EXPECT_EQ(sws[1].comm_creations, 0u) << "the first layout is cached";
  EXPECT_EQ(sws[2].comm_creations, 0u) << "switching back to an etp layout must reuse its groups";
  EXPECT_EQ(sws[3].comm_creations, 8u) << "a new layout with cp > 1: 7 groups and the dp x cp group";
}

TEST(Train, PreparedWhileStepsRunAndSwitchBackUsesCachedCommunicators) {
  const auto o = tiny("tiny-dense", 8, 32);
  const auto stat = losses(o, 4, {{0, "tp=2,dp=2"}}, 12);
  std::vector<double> dyn;
  std::vector<SwitchStats> sws;
  comm::run_ranks(4, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg("tp=2,dp=2"), world, embedded_text());
    for (int s = 0; s < 12; ++s) {
      if (s == 2) t.prepare(cfg("pp=2,dp=2"));
      if (s == 6) t.prepare(cfg("tp=2,dp=2"));
      if (s == 4 || s == 8) {
        EXPECT_TRUE(t.preparing());
        auto sw = t.commit();
        if (world.rank() == 0) sws.push_back(sw);
      }
      auto st = t.step();
      if (world.rank() == 0) dyn.push_back(st.loss);
    }
    t.finish();
  });
  ASSERT_EQ(sws.size(), 2u);
  EXPECT_GT(sws[0].prefaulted_bytes, 0u) << "the first prepare touches the memory its commit will need";
  EXPECT_EQ(sws[0].comm_creations, 7u) << "a new layout: one split per group kind";
  EXPECT_EQ(sws[1].comm_creations, 0u) << "switching back must reuse the cached communicators";
  for (const auto& sw : sws) {
    EXPECT_TRUE(sw.refused.empty());
    EXPECT_GT(sw.prepare_s, 0.0);
    EXPECT_GE(sw.hidden_fraction, 0.0);
    EXPECT_LE(sw.hidden_fraction, 1.0);
    EXPECT_GT(sw.bytes_received, 0u);
    EXPECT_GT(sw.peak_bytes, 0u);
    EXPECT_LE(sw.peak_bytes, sw.bound_bytes) << sw.from << " -> " << sw.to;
    EXPECT_LE(sw.peak_over_bound, 1.0) << "some rank's pool peak exceeds max(source, destination) + budget";
    std::printf("[ switch  ] %s -> %s: pool peak %llu / bound %llu bytes, prefaulted %llu, fresh in commit %llu\n",
                sw.from.c_str(), sw.to.c_str(), static_cast<unsigned long long>(sw.peak_bytes),
                static_cast<unsigned long long>(sw.bound_bytes), static_cast<unsigned long long>(sw.prefaulted_bytes),
                static_cast<unsigned long long>(sw.fresh_bytes));
    EXPECT_EQ(sw.world_before, 4);
    EXPECT_EQ(sw.world_after, 4);
  }
  ASSERT_EQ(dyn.size(), stat.size());
  for (std::size_t i = 0; i < dyn.size(); ++i) EXPECT_NEAR(dyn[i], stat[i], loss_tolerance("tiny-dense")) << "step " << i;
}

// Auto placement that reorders the world (tp=4 -> pp=2,tp=2 moves two ranks to other processes):
// the first switch splits the 7 groups and the reordered world and its control; switching back
// and forth again finds the worlds by their processes in rank order and the groups in the
// cache, so neither its prepare nor its commit creates a communicator.
TEST(Train, AutoPlacementSwitchBackReusesTheReorderedWorld) {
  auto o = tiny("tiny-dense", 8, 32);
  o.placement = TrainerOptions::Placement::kAuto;
  std::vector<SwitchStats> sws;
  const std::vector<std::string> to = {"pp=2,tp=2", "tp=4", "pp=2,tp=2"};
  comm::run_ranks(4, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg("tp=4"), world, embedded_text());
    for (const auto& c : to) {
      t.prepare(cfg(c));
      auto sw = t.commit();
      if (t.world().rank() == 0) sws.push_back(sw);
      t.step();
    }
    t.finish();
  });
  ASSERT_EQ(sws.size(), 3u);
  ASSERT_NE(sws[0].placement, "fixed") << "auto placement kept the identity: the test no longer covers a reorder";
  EXPECT_EQ(sws[0].comm_creations, 7u + 2u) << "a new layout on a reordered world: 7 groups, the world, its control";
  EXPECT_EQ(sws[1].comm_creations, 0u) << "switching back (placement " << sws[1].placement << ") must reuse the world and groups";
  EXPECT_EQ(sws[2].comm_creations, 0u) << "switching forth again (placement " << sws[2].placement << ") must reuse them";
}

// With page-aligned tensors (TrainerOptions::align_pages, the default) the commit's kept tensors
// that sit at a new offset are moved by remapping pages (the pool's page-wise memory reaches the
// engine): some kept bytes are remapped, the peak stays within its bound, and the loss tracks
// the static run, which is packed (align_pages = false, train --no-align-pages): the padding
// changes nothing.
TEST(Train, AlignedPagesSwitchRemapsKeptTensors) {
  auto o = tiny("tiny-dense", 8, 32);
  EXPECT_TRUE(o.align_pages) << "page-aligned tensors are the trainer's default";
  o.align_pages = false;
  const auto stat = losses(o, 4, {{0, "tp=2,dp=2"}}, 6);
  o.align_pages = true;
  std::vector<double> dyn;
  std::vector<SwitchStats> sws;
  comm::run_ranks(4, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg("tp=2,dp=2"), world, embedded_text());
    for (int s = 0; s < 6; ++s) {
      if (s == 2 || s == 4) {
        auto sw = t.switch_to(cfg(s == 2 ? "pp=2,dp=2" : "tp=2,dp=2"));
        if (world.rank() == 0) sws.push_back(sw);
      }
      auto st = t.step();
      if (world.rank() == 0) dyn.push_back(st.loss);
    }
    t.finish();
  });
  ASSERT_EQ(sws.size(), 2u);
  for (const auto& sw : sws) {
    EXPECT_GT(sw.kept_remapped_bytes, 0u) << sw.from << " -> " << sw.to << ": no kept byte was remapped";
    EXPECT_LE(sw.kept_remapped_bytes + sw.kept_zero_copy_bytes, sw.bytes_kept);
    EXPECT_LE(sw.peak_over_bound, 1.0) << "some rank's pool peak exceeds max(source, destination) + budget";
  }
  ASSERT_EQ(dyn.size(), stat.size());
  for (std::size_t i = 0; i < dyn.size(); ++i) EXPECT_NEAR(dyn[i], stat[i], loss_tolerance("tiny-dense")) << "step " << i;
}

// With a launcher that lets ranks leave (threads return), a shrink ends the ranks the new
// layout does not use; a later grow that cannot start processes is refused and the job goes on
// in its layout with nothing lost (the loss still tracks the static run). With fixed placement
// the highest ranks leave; with auto placement the processes it gives no rank leave, and the
// new world is ordered by it (process placement[r] becomes rank r).
void shrink_then_refused_grow(TrainerOptions::Placement placement) {
  auto o = tiny("tiny-dense", 8, 32);
  const auto stat = losses(o, 4, {{0, "dp=4"}}, 10);
  o.launcher = std::make_shared<edm::InprocLauncher>();
  o.placement = placement;
  std::vector<double> dyn;
  std::mutex mu;
  std::vector<int> left, stayed_as;  // stayed_as[new rank] = old rank
  std::string refused, placed;
  comm::run_ranks(4, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg("dp=4"), world, embedded_text());
    const int old_rank = world.rank();
    for (int s = 0; s < 10; ++s) {
      if (s == 3) {
        auto sw = t.switch_to(cfg("dp=2"));
        std::lock_guard<std::mutex> lock(mu);
        if (t.left()) {
          left.push_back(old_rank);
          return;
        }
        EXPECT_EQ(sw.world_after, 2);
        EXPECT_EQ(t.world_size(), 2);
        if (t.world().rank() == 0) placed = sw.placement;
        stayed_as.resize(2, -1);
        stayed_as.at(t.world().rank()) = old_rank;
      }
      if (s == 6) {
        auto sw = t.switch_to(cfg("dp=4"));
        if (t.world().rank() == 0) refused = sw.refused;
        EXPECT_EQ(t.config().str(), cfg("dp=2").str());
      }
      auto st = t.step();
      if (t.world().rank() == 0) dyn.push_back(st.loss);
    }
    t.finish();
  });
  std::sort(left.begin(), left.end());
  if (placement == TrainerOptions::Placement::kFixed) {
    EXPECT_EQ(placed, "fixed");
    EXPECT_EQ(left, (std::vector<int>{2, 3}));
  } else {
    ASSERT_NE(placed, "fixed") << "auto placement kept the identity: the test no longer covers a reorder";
    EXPECT_EQ(placed, std::to_string(stayed_as[0]) + "," + std::to_string(stayed_as[1]));
    std::vector<int> all = left;
    all.insert(all.end(), stayed_as.begin(), stayed_as.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (std::vector<int>{0, 1, 2, 3}));
  }
  EXPECT_NE(refused.find("cannot start 2 process(es)"), std::string::npos) << refused;
  ASSERT_EQ(dyn.size(), stat.size());
  for (std::size_t i = 0; i < dyn.size(); ++i) EXPECT_NEAR(dyn[i], stat[i], loss_tolerance("tiny-dense")) << "step " << i;
}

// Every ZeRO stage in one run: sharded grads and params enter and leave the layout (18 steps,
// a switch every 3, to keep the suite short).
TEST(Train, DenseLossTracksStaticRunAcrossZeroStages) {
  expect_tracks("tiny-dense",
                {{0, "dp=2,zero=1"},
                 {3, "dp=2,zero=3"},       // params sharded
                 {6, "tp=2,zero=2"},      // grads sharded, TP
                 {9, "dp=4,zero=0"},      // replicated optimizer
                 {12, "tp=2,dp=2,zero=3"},
                 {15, "pp=2,dp=2,zero=2"}},
                4, /*check_fault=*/false, /*steps=*/18);
}

TEST(Train, MoeLossTracksStaticRunAcrossZeroStages) {
  expect_tracks("tiny-moe",
                {{0, "dp=2,ep=2,zero=1"},
                 {3, "dp=4,ep=2,zero=3"},
                 {6, "tp=2,dp=2,ep=4,zero=2"},
                 {9, "dp=4,ep=4,zero=0"},
                 {12, "pp=2,dp=2,ep=2,zero=3"},
                 {15, "tp=2,dp=2,ep=2,zero=2"}},
                4, /*check_fault=*/false, /*steps=*/18);
}

// Context parallel (load-balanced causal split) entering and leaving, with TP, PP and ZeRO-3.
TEST(Train, DenseLossTracksStaticRunAcrossContextParallel) {
  expect_tracks("tiny-dense",
                {{0, "tp=2,dp=2"},
                 {3, "cp=2,dp=2"},
                 {6, "tp=2,cp=2,zero=3"},
                 {9, "cp=4,zero=2"},
                 {12, "pp=2,cp=2"},
                 {15, "dp=4"}},
                4, /*check_fault=*/false, /*steps=*/18);
}

// Expert TP (etp 2 and 4) entering and leaving, with EP, ZeRO-3 and a plain EP layout.
TEST(Train, MoeLossTracksStaticRunAcrossExpertTp) {
  expect_tracks("tiny-moe",
                {{0, "dp=2,ep=2"},
                 {3, "tp=2,dp=2,ep=2,etp=2"},
                 {6, "tp=4,etp=4,zero=3"},
                 {9, "tp=2,etp=2"},
                 {12, "tp=4,ep=2,etp=2"},
                 {15, "dp=4,ep=4"}},
                4, /*check_fault=*/false, /*steps=*/18);
}

TEST(Train, SwitchIntoAndOutOfPaddingOnlyRanksTracksStaticRun) {
  const auto o = padded_vocab();
  const auto stat = losses(o, 4, {{0, "dp=1"}}, 12);
  const auto dyn = losses(o, 4, {{0, "tp=4"}, {4, "tp=3"}, {8, "tp=2,dp=2"}}, 12);
  ASSERT_EQ(dyn.size(), stat.size());
  for (std::size_t i = 0; i < dyn.size(); ++i) EXPECT_NEAR(dyn[i], stat[i], 1e-4) << "step " << i;
}

TEST(Train, DeepSeekShapeLossTracksStaticRun) {
  // tiny-deepseek-v2: shared expert, dense layer 0 and MLA in one model (tiny-qwen2-moe's gate
  // and q/k/v biases are covered by the reference and lossless-switch tests).
  for (const std::string model : {"tiny-deepseek-v2"})
    expect_tracks(model,
                  {{0, "dp=2,ep=2"},
                   {4, "tp=2,dp=2,ep=2,etp=2,zero=3"},
                   {8, "pp=2,dp=2,ep=2"},
                   {12, "tp=4,ep=2,zero=2"}},
                  4, /*check_fault=*/false, /*steps=*/16);
}

// ---- 5. --bf16: bf16 params, fp32 grads / master / moments ----
// After every step the bf16 params are the fp32 master rounded to bf16 (round to nearest even),
// bit for bit, at every ZeRO stage (ZeRO-1/2 all-gather the rounded shards, ZeRO-3 rounds its
// own shard); the master is not itself bf16 (it keeps the low bits the updates add).
TEST(Train, Bf16ParamsAreTheRoundedMasterAtEveryZeroStage) {
  for (const std::string model : {"tiny-dense", "tiny-moe"}) {
    auto o = tiny(model);
    o.bf16 = true;
    for (std::string config : {"dp=1,zero=0", "dp=2,zero=0", "tp=2,dp=2,zero=1", "dp=4,zero=2", "tp=2,dp=2,zero=3"}) {
      if (model == "tiny-moe" && config != "dp=1,zero=0") config += ",ep=2";
      const auto st = state_after(o, config, 3);
      ASSERT_EQ(st.size(), 4u);
      const auto& param = st[0];
      const auto& master = st[1];
      std::int64_t differ = 0, master_beyond_bf16 = 0, n = 0;
      for (std::size_t t = 0; t < param.size(); ++t)
        for (std::size_t i = 0; i < param[t].size(); ++i, ++n) {
          const float rounded = float_from_bf16(bf16_from_float(master[t][i]));
          differ += std::memcmp(&rounded, &param[t][i], sizeof(float)) != 0;
          master_beyond_bf16 += rounded != master[t][i];
        }
      EXPECT_EQ(differ, 0) << model << " " << config << ": params that are not bf16(master)";
      EXPECT_GT(master_beyond_bf16, n / 2) << model << " " << config << ": the master should keep fp32 bits";
    }
  }
}

// The trainer's state per parameter: 20 bytes in fp32 (param, grad, master, exp_avg, exp_avg_sq),
// 18 with --bf16 (2-byte params); ZeRO-0 on one rank, where every kind has the same elements.
TEST(Train, Bf16StateBytesPerParameter) {
  for (const std::string model : {"tiny-dense", "tiny-moe"}) {
    const auto m = test_model(model);
    const vps::Layout layout(m, cfg("dp=1,zero=0"), trainer_layout_options(32768));
    const auto rl = layout.rank_layout(0);
    const std::size_t fp32 = state_bytes(rl, trainer_elem_bytes(false)), bf16 = state_bytes(rl, trainer_elem_bytes(true));
    EXPECT_EQ(fp32 * 18, bf16 * 20) << model;
    EXPECT_GE(fp32, static_cast<std::size_t>(vps::parameter_count(m)) * 20) << model;
  }
}

// A resumed trainer skips the per-element weight init of the kinds the checkpoint load
// overwrites next (TrainerOptions::loaded_kinds): those are only zeroed, the others initialised.
TEST(Train, InitStateSkipsTheKindsALoadOverwrites) {
  const vps::Layout layout(test_model("tiny-dense"), cfg("dp=1,zero=0"), trainer_layout_options(32768));
  const auto rl = layout.rank_layout(0);
  exec::PoolAllocator pool;
  Arenas all(rl, pool), skipped(rl, pool);
  init_state(layout, rl, all, 1234);
  init_state(layout, rl, skipped, 1234, {vps::StateKind::kParam});
  std::int64_t all_nonzero = 0, skipped_nonzero = 0;
  for (const auto& b : rl.buffers) {
    if (b.kind != vps::StateKind::kParam) continue;
    for (std::int64_t i = 0; i < b.numel; ++i) {
      all_nonzero += all.data(b)[i] != 0.0f;
      skipped_nonzero += skipped.data(b)[i] != 0.0f;
    }
  }
  EXPECT_GT(all_nonzero, 1000);
  EXPECT_EQ(skipped_nonzero, 0);
}

// A --bf16 run that switches layouts (TP, PP, DP resize, ZeRO-3, shrink to ZeRO-0, CP; for MoE
// EP, expert TP and ZeRO-3) tracks the static --bf16 run. Rounding the fp32 products and the
// params to bf16 makes the noise of another reduction order far larger than in fp32 (measured
// as static-vs-static in another layout: dense 4e-4 over 24 steps against 1e-6 in fp32, MoE
// 4e-3 over 16 against 3e-4), and past ~25 dense / ~16 MoE steps the tiny models' bf16 loss
// turns chaotic at this learning rate (static-vs-static gaps of 0.1 there), so these runs stop
// before. Floors 2e-3 / 1e-2 (raised to 2x the run's own static-vs-static gap where that is
// larger, see tracking_tolerance); a switch that loses the Adam moments must move the loss by
// more than 5x the tolerance (checked; measured 0.32 / 0.42).
TEST(Train, Bf16LossTracksStaticRun) {
  expect_tracks("tiny-dense",
                {{0, "tp=2,dp=2"}, {4, "pp=2,dp=2"}, {8, "dp=4,zero=3"}, {12, "tp=2,pp=2"}, {16, "dp=2,zero=0"},
                 {20, "tp=2,cp=2,zero=2"}},
                4, /*check_fault=*/true, /*steps=*/24, /*bf16=*/true, /*tolerance=*/2e-3);
  expect_tracks("tiny-moe",
                {{0, "dp=2,ep=2"}, {3, "tp=2,dp=2,ep=2,etp=2"}, {6, "dp=4,ep=4,zero=3"}, {9, "pp=2,dp=2,ep=2"},
                 {12, "tp=4,ep=2,zero=2"}},
                4, /*check_fault=*/true, /*steps=*/16, /*bf16=*/true, /*tolerance=*/1e-2);
}

// The bf16 static run learns like the fp32 one (same init, data and optimizer): within 0.05 over
// 16 steps (measured 1.3e-3 dense, 2.4e-2 MoE), and not identical (bf16 is really used).
TEST(Train, Bf16LearnsLikeFp32) {
  for (const std::string model : {"tiny-dense", "tiny-moe"}) {
    auto o = tiny(model, 8, 32);
    const auto fp32 = losses(o, 2, {{0, model == "tiny-moe" ? "dp=2,ep=2" : "dp=2"}}, 16);
    o.bf16 = true;
    const auto bf16 = losses(o, 2, {{0, model == "tiny-moe" ? "dp=2,ep=2" : "dp=2"}}, 16);
    ASSERT_EQ(fp32.size(), bf16.size());
    double gap = 0;
    for (std::size_t i = 0; i < fp32.size(); ++i) gap = std::max(gap, std::abs(bf16[i] - fp32[i]));
    std::printf("[ bf16    ] %s: loss %.4f -> %.4f (fp32 %.4f -> %.4f), max |bf16 - fp32| %.2e\n", model.c_str(),
                bf16.front(), bf16.back(), fp32.front(), fp32.back(), gap);
    EXPECT_LT(gap, 0.05) << model;
    EXPECT_GT(gap, 0.0) << model << ": bf16 and fp32 runs should not be identical";
  }
}

TEST(Train, ShrinkLeavesAndARefusedGrowKeepsTraining) { shrink_then_refused_grow(TrainerOptions::Placement::kFixed); }
TEST(Train, AutoPlacementChoosesWhoLeavesAndOrdersTheNewWorld) {
  shrink_then_refused_grow(TrainerOptions::Placement::kAuto);
}

TEST(Train, ScheduleParsing) {
  auto s = parse_schedule("0:tp=2,pp=2,dp=2;50:tp=1,pp=2,dp=4");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].first, 50);
  EXPECT_EQ(s[1].second.dp, 4);
  EXPECT_THROW(parse_schedule("5:dp=2"), InputError);
  EXPECT_THROW(parse_schedule("0:dp=2;0:dp=4"), InputError);
  EXPECT_THROW(parse_schedule("0:dp=2;x:dp=4"), InputError);
  // Empty entries, signs, spaces and steps beyond int64 are refused, never skipped or clamped.
  for (const char* bad : {"0:dp=2;;4:dp=4", "0:dp=2;", ";0:dp=2", "0:dp=2;+4:dp=4", " 0:dp=2", "0:dp=2; 4:dp=4",
                          "0:dp=2;-4:dp=4", "0:dp=2;99999999999999999999:dp=4", "0:"})
    EXPECT_THROW(parse_schedule(bad), InputError) << bad;
  EXPECT_EQ(parse_schedule("0:dp=2;0004:dp=4")[1].first, 4);
}

TEST(Train, UnsupportedConfigsAreInputErrors) {
  auto o = tiny("tiny-dense");
  for (const std::string c : {"cp=3", "dp=3"}) {  // seq 16: not 2*cp chunks; batch 8 over dp
    auto config = cfg(c);
    EXPECT_THROW(Trainer::check_supported(o, config), InputError) << c;
  }
  auto moe = tiny("tiny-moe");
  for (const std::string c : {"dp=2,etp=2", "tp=2,dp=2,etp=4"}) {  // etp must divide tp
    auto config = cfg(c);
    EXPECT_THROW(Trainer::check_supported(moe, config), InputError) << c;
  }
  auto gpt = tiny("gpt3-1.3b");
  auto one = cfg("dp=1");
  EXPECT_THROW(Trainer::check_supported(gpt, one), InputError);
}

TEST(Train, ModelFamiliesBeyondLlamaAreRefused) {
  auto one = cfg("dp=1");
  auto qkv_bias = tiny("tiny-dense");
  qkv_bias.model.qkv_bias = true;
  auto proj_bias = qkv_bias;
  proj_bias.model.proj_bias = true;
  auto linear_bias = tiny("tiny-dense");
  linear_bias.model.bias = true;
  auto shared = tiny("tiny-moe");
  shared.model.shared_expert_ffn = 32;
  auto dense_first = tiny("tiny-moe");
  dense_first.model.ffn = 128;
  dense_first.model.dense_layers = {0};
  auto mla = tiny("tiny-dense");
  mla.model.kv_heads = mla.model.heads;
  mla.model.kv_lora_rank = 16, mla.model.qk_nope_dim = 4, mla.model.qk_rope_dim = 4;
  mla.model.v_head_dim = 8, mla.model.head_dim = 8;
  for (auto* o : {&proj_bias, &linear_bias})
    EXPECT_THROW(Trainer::check_supported(*o, one), InputError) << o->model.features_beyond_llama().front();
  for (auto* o : {&qkv_bias, &shared, &dense_first, &mla})  // implemented (*MatchesReference)
    EXPECT_NO_THROW(Trainer::check_supported(*o, one)) << o->model.features_beyond_llama().front();
  auto llama = tiny("tiny-dense");
  EXPECT_NO_THROW(Trainer::check_supported(llama, one));
}

}  // namespace
}  // namespace dynatrain::train
