// vps/state_kind.h: the state-kind table is what names, parses and sizes kinds.
#include "vps/state_kind.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "vps/layout.h"

namespace dynatrain::vps {
namespace {

TEST(StateKinds, OneTableNamesParsesAndSizesEveryKind) {
  EXPECT_EQ(mixed_elem_bytes(), (ElemBytes{2, 2, 4, 4, 4}));
  EXPECT_EQ(LayoutOptions{}.elem_bytes, mixed_elem_bytes());
  EXPECT_EQ(fp32_elem_bytes(), (ElemBytes{4, 4, 4, 4, 4}));
  for (const auto& k : kStateKinds) EXPECT_EQ(parse_state_kinds(k.name), std::vector<StateKind>{k.kind});
  EXPECT_EQ(parse_state_kinds("all").size(), static_cast<std::size_t>(kNumStateKinds));
  EXPECT_EQ(parse_state_kinds("optimizer"),
            (std::vector<StateKind>{StateKind::kParam, StateKind::kMaster, StateKind::kExpAvg, StateKind::kExpAvgSq}));
  EXPECT_EQ(parse_state_kinds("exp_avg,param,param"), (std::vector<StateKind>{StateKind::kParam, StateKind::kExpAvg}));
  EXPECT_STREQ(state_kind_name(StateKind::kExpAvgSq), "exp_avg_sq");
  EXPECT_EQ(kind_bit(StateKind::kGrad), 2u);
  try {
    parse_state_kinds("momentum");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("valid: param, grad, master, exp_avg, exp_avg_sq"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dynatrain::vps
