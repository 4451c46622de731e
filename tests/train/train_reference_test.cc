// Every parallel dimension's forward and backward against a single-process reference (logits
// and gradients, fp32 tolerance), and the distributed Adam step against ZeRO-0 on one rank.
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

// ---- 1. forward and backward against a single-process reference ----
class DenseMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(DenseMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-dense", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, DenseMatchesReference,
                         ::testing::Values("tp=2", "tp=4", "tp=8", "dp=2,zero=0", "dp=4", "pp=2", "pp=4",
                                           "tp=2,pp=2,dp=2", "dp=4,zero=2", "tp=2,dp=2,zero=3", "pp=2,dp=2,zero=3",
                                           "cp=2", "cp=4", "tp=2,cp=2,zero=3", "pp=2,cp=2,zero=0"),
                         config_test_name);

class MoeMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-moe", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, MoeMatchesReference,
                         ::testing::Values("dp=2,ep=2", "dp=4,ep=4", "tp=2,ep=2", "tp=2,dp=2,ep=4", "tp=4",
                                           "pp=2,dp=2,ep=2", "dp=4,ep=2,zero=2", "tp=2,dp=2,ep=2,zero=3", "tp=2,etp=2",
                                           "tp=4,etp=2", "tp=2,dp=2,ep=2,etp=2", "tp=4,etp=4,zero=3", "cp=2,ep=2",
                                           "tp=2,cp=2,ep=2,etp=2,zero=2"),
                         config_test_name);

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
                         config_test_name);

class MlaMatchesReference : public ::testing::TestWithParam<std::string> {};
TEST_P(MlaMatchesReference, LogitsAndGradients) { expect_matches_reference("tiny-mla", GetParam()); }
INSTANTIATE_TEST_SUITE_P(Train, MlaMatchesReference,
                         ::testing::Values("tp=2", "tp=8", "tp=2,dp=2,zero=3", "pp=2,dp=2,zero=2", "tp=2,cp=2"),
                         config_test_name);
INSTANTIATE_TEST_SUITE_P(Train, SharedExpertMoeMatchesReference,
                         ::testing::Values("tp=2,ep=2", "dp=2,ep=2,zero=3", "tp=2,dp=2,ep=2,etp=2", "pp=2,dp=2,ep=2"),
                         config_test_name);

TEST(Train, DistributedAdamMatchesReference) {
  for (const std::string model : {"tiny-dense", "tiny-moe"}) {
    const auto o = tiny(model);
    const auto ref = state_after(o, "dp=1,zero=0", 3);
    for (const std::string config :
         {"dp=4,zero=1", "tp=2,dp=2,zero=1", "dp=2,zero=0", "dp=4,zero=2", "tp=2,dp=2,zero=3", "dp=1,zero=3"}) {
      std::string c = config;
      if (model == "tiny-moe" && config.rfind("dp=1", 0) != 0) c += ",ep=2";
      const auto got = state_after(o, c, 3);
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t k = 0; k < got.size(); ++k)
        for (std::size_t t = 0; t < got[k].size(); ++t)
          expect_close(got[k][t], ref[k][t], 2e-3, 1e-7,
                       model + " " + c + " kind " + std::to_string(k) + " tensor " + std::to_string(t));
    }
  }
}

}  // namespace
}  // namespace dynatrain::train::test
