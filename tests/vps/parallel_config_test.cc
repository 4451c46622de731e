#include <gtest/gtest.h>

#include "common/error.h"
#include "vps/parallel_config.h"

namespace dynatrain::vps {
namespace {

std::string error_of(const std::string& model, const std::string& config) {
  try {
    ParallelConfig c = ParallelConfig::parse(config);
    c.validate_for(model_from_name(model));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelConfig, ParsesDefaultsAndRoundTrips) {
  auto c = ParallelConfig::parse("tp=4,pp=2,dp=8");
  EXPECT_EQ(c.tp, 4);
  EXPECT_EQ(c.cp, 1);
  EXPECT_EQ(c.zero, 1);
  EXPECT_EQ(c.world_size(), 64);
  auto u = ParallelConfig::parse("tp=2,pp=4,dp=2,ep=4,zero=3,pp_layers=24/23/23/24");
  EXPECT_EQ(ParallelConfig::parse(u.str()), u);
}

TEST(ParallelConfig, RankOrderIsTpCpDpPp) {
  auto c = ParallelConfig::parse("tp=2,cp=2,dp=3,pp=2");
  for (int r = 0; r < c.world_size(); ++r) {
    auto rc = rank_coords(c, r);
    EXPECT_EQ(rank_of(c, rc.tp, rc.cp, rc.dp, rc.pp), r);
  }
  auto rc = rank_coords(c, 13);  // 13 = 1 + 2*(0 + 2*(0 + 3*1)) -> tp1 cp0 dp0 pp1
  EXPECT_EQ(rc.tp, 1);
  EXPECT_EQ(rc.cp, 0);
  EXPECT_EQ(rc.dp, 0);
  EXPECT_EQ(rc.pp, 1);
  EXPECT_FALSE(rank_coords(c, 24).active);
}

TEST(ParallelConfig, ExpertDecompositionIsEtpEpEdp) {
  auto c = ParallelConfig::parse("tp=2,dp=4,ep=2,etp=2");
  EXPECT_EQ(c.edp(), 2);
  auto rc = rank_coords(c, 7);  // in-stage 7 = etp 1 + 2*(ep 1 + 2*edp 1)
  EXPECT_EQ(rc.etp, 1);
  EXPECT_EQ(rc.ep, 1);
  EXPECT_EQ(rc.edp, 1);
}

TEST(ParallelConfig, ErrorsNameTheValueAndTheValidChoices) {
  EXPECT_EQ(error_of("llama2-7b", "tp=3,dp=1"),
            "tp=3 does not divide 32 attention heads; valid tp: 1, 2, 4, 8, 16, 32");
  EXPECT_NE(error_of("qwen3-235b-a22b", "tp=4,pp=4,dp=2").find("pp_layers=24/24/23/23"), std::string::npos);
  EXPECT_NE(error_of("qwen3-235b-a22b", "tp=4,dp=2,ep=3").find("ep=3 does not divide 128 experts"), std::string::npos);
  EXPECT_NE(error_of("qwen3-235b-a22b", "tp=2,dp=2,ep=8").find("ep*etp=8"), std::string::npos);
  EXPECT_NE(error_of("llama2-70b", "tp=12").find("tp=12"), std::string::npos);
  EXPECT_NE(error_of("llama2-7b", "tp=2,ep=2").find("has no experts"), std::string::npos);
  EXPECT_NE(error_of("llama2-7b", "tp=2,zero=4").find("zero: 0, 1, 2, 3"), std::string::npos);
  EXPECT_NE(error_of("llama2-7b", "tp=2,foo=1").find("unknown key 'foo'"), std::string::npos);
  EXPECT_NE(error_of("llama2-7b", "tp=two").find("tp=two is not an integer"), std::string::npos);
  EXPECT_NE(error_of("llama2-7b", "pp=2,pp_layers=10/10").find("sum to 20"), std::string::npos);
  EXPECT_NE(error_of("nope", "tp=1").find("unknown model 'nope'"), std::string::npos);
  EXPECT_EQ(error_of("qwen3-235b-a22b", "tp=4,pp=2,dp=16,ep=16"), "");
}

}  // namespace
}  // namespace dynatrain::vps
