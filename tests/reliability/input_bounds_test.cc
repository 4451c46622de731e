// Parse-time bounds (docs/errors.md): sizes that would overflow later are refused where they are
// parsed, with an InputError naming the value; hostile sizes do not loop or allocate.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/bytes.h"
#include "common/error.h"
#include "vps/layout.h"
#include "vps/parallel_config.h"
#include "common/clock.h"

namespace dynatrain {
namespace {

using vps::ParallelConfig;

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(ConfigBounds, StrayCommasAreRefused) {
  for (const char* text : {"tp=2,", ",tp=2", "tp=2,,dp=2", ","})
    EXPECT_NE(input_error_of([&] { ParallelConfig::parse(text); }).find("stray comma"), std::string::npos) << text;
}

TEST(ConfigBounds, WorldSizeIsBoundedWithoutOverflow) {
  EXPECT_NE(
      input_error_of([] { ParallelConfig::parse("tp=1024,cp=1024,dp=1024,pp=1024"); }).find("1099511627776 ranks"),
      std::string::npos);
  EXPECT_EQ(ParallelConfig::parse("dp=131072").world_size(), vps::kMaxWorldSize);
  EXPECT_THROW(ParallelConfig::parse("dp=131073"), InputError);
}

TEST(ConfigBounds, PipelineLayersAreBounded) {
  EXPECT_THROW(ParallelConfig::parse("pp=2,pp_layers=9223372036854775807/1"), InputError);
  EXPECT_THROW(ParallelConfig::parse("pp=2,pp_layers=0/4"), InputError);
  EXPECT_THROW(ParallelConfig::parse("pp=2,pp_layers=4/"), InputError);
  EXPECT_EQ(ParallelConfig::parse("pp=2,pp_layers=3/1").pp_layers, (std::vector<std::int64_t>{3, 1}));
}

vps::ModelSpec small_model() {
  vps::ModelSpec m = vps::model_from_name("tiny-dense");
  m.name = "test";
  return m;
}

TEST(ModelBounds, HugeHeadCountsListDivisorsQuickly) {
  vps::ModelSpec m = small_model();
  m.heads = m.kv_heads = 1'000'000'000'000;  // 1e12: a linear divisor search would not end
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = input_error_of([&] { ParallelConfig::parse("tp=7").validate_for(m); });
  EXPECT_LT(seconds_since(t0), 2.0);
  EXPECT_NE(message.find("tp=7 does not divide 1000000000000 attention heads"), std::string::npos) << message;
  EXPECT_NE(message.find("in all)"), std::string::npos) << message;  // a long list is cut
}

TEST(ModelBounds, SizesThatOverflowAreRefusedBeforeLayout) {
  vps::ModelSpec m = small_model();
  m.hidden = std::int64_t{1} << 40;
  m.ffn = std::int64_t{1} << 40;
  const std::string huge = input_error_of([&] { vps::Layout(m, ParallelConfig::parse("tp=1")); });
  EXPECT_TRUE(huge.find("beyond this build's limit") != std::string::npos ||
              huge.find("sizes are too large") != std::string::npos)
      << huge;
  m = small_model();
  m.layers = std::int64_t{1} << 40;
  EXPECT_NE(
      input_error_of([&] { vps::Layout(m, ParallelConfig::parse("tp=1")); }).find("num_hidden_layers=1099511627776"),
      std::string::npos);
}

TEST(ByteSizes, NeverWrap) {
  EXPECT_EQ(parse_bytes("1024TiB"), std::uint64_t{1} << 50);
  EXPECT_EQ(parse_bytes("1048576TiB"), kMaxBytes);
  EXPECT_THROW(parse_bytes("1048577TiB"), InputError);
  EXPECT_THROW(parse_bytes("99999999999999999999999"), InputError);
  EXPECT_THROW(parse_bytes("18446744073709551615"), InputError);
}

}  // namespace
}  // namespace dynatrain
