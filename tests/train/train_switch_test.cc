// A switch moves every weight and optimizer element bit for bit (gathered in VPS coordinates
// before and after), by the engine and by the gather reference path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/train/train_fixture.h"

namespace dynatrain::train::test {
namespace {

using vps::StateKind;

// ---- 2. a switch is lossless, bit for bit ----
struct SwitchCase {
  std::string model, from, to;
  int world;
  SwitchMethod method;
  bool bf16 = false;  // --bf16: bf16 params (2-byte elements) beside the fp32 master
};

void PrintTo(const SwitchCase& c, std::ostream* os) {
  *os << c.model << " " << c.from << " -> " << c.to << " (" << switch_method_name(c.method) << (c.bf16 ? ", bf16" : "")
      << ")";
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
      EXPECT_EQ(differ, 0) << vps::state_kind_name(kinds[i]) << ": tensors not bit-equal after " << p.from << " -> "
                           << p.to;
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

INSTANTIATE_TEST_SUITE_P(Train, SwitchIsLossless, ::testing::ValuesIn(switch_cases()), [](const auto& info) {
  std::string s = info.param.model + "_" + info.param.from + "_to_" + info.param.to + "_" +
                  switch_method_name(info.param.method) + (info.param.bf16 ? "_bf16" : "");
  for (auto& ch : s)
    if (ch == ',' || ch == '=' || ch == '-') ch = '_';
  return s;
});

}  // namespace
}  // namespace dynatrain::train::test
