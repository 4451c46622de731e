// What the trainer accepts: schedules, configs and model families (InputError otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/train/train_fixture.h"

#include "common/error.h"
#include "job/train_job.h"

namespace dynatrain::train::test {
namespace {

using job::parse_schedule;
using vps::StateKind;

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
}  // namespace dynatrain::train::test
