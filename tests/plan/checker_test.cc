// plan/checker.h: the exact-cover checker catches a missing, a duplicated and a stolen piece, and
// a piece of a tensor the layout does not have.
#include "plan/checker.h"

#include <gtest/gtest.h>

#include "tests/plan/plan_fixture.h"

namespace dynatrain::plan {
namespace {

using plan_test::plan_between;
using plan_test::small_buckets;

TEST(Checker, CatchesAMissingADuplicatedAndAStolenPiece) {
  const auto m = vps::model_from_name("tiny-dense");
  auto p = plan_between(m, "tp=2,pp=2,zero=1", "tp=1,pp=2,dp=4,zero=1", small_buckets(1000));
  ASSERT_TRUE(check_plan(p.src, p.dst, p.plans).ok);

  auto missing = p.plans;
  auto& recv = missing[5].recv.begin()->second;
  recv.pop_back();
  auto r1 = check_plan(p.src, p.dst, missing);
  EXPECT_FALSE(r1.ok);

  auto twice = p.plans;
  twice[0].keep.push_back(twice[0].keep.front());
  auto r2 = check_plan(p.src, p.dst, twice);
  EXPECT_FALSE(r2.ok);
  EXPECT_NE(r2.violation.find("written 2 times"), std::string::npos) << r2.violation;

  // A piece attributed to a source rank that does not hold it.
  auto stolen = p.plans;
  auto& piece = stolen[4].recv.begin()->second.front();
  piece.src_segment += 1000;
  EXPECT_FALSE(check_plan(p.src, p.dst, stolen).ok);
}

// A plan from outside the planner naming a tensor the layout does not have is refused by name.
TEST(Checker, RefusesAPieceOfATensorTheLayoutDoesNotHave) {
  const auto m = vps::model_from_name("tiny-dense");
  auto p = plan_between(m, "tp=2,pp=2,zero=1", "tp=1,pp=2,dp=4,zero=1", small_buckets(1000));
  const auto tensors = p.dst.tensors().size();
  for (bool keep : {true, false}) {
    auto bad = p.plans;
    auto& piece = keep ? bad[0].keep.front() : bad[4].recv.begin()->second.front();
    piece.tensor = static_cast<std::uint32_t>(tensors + 7);
    const auto r = check_plan(p.src, p.dst, bad);
    ASSERT_FALSE(r.ok);
    EXPECT_NE(
        r.violation.find("tensor " + std::to_string(tensors + 7) + " (the layout has " + std::to_string(tensors) + ")"),
        std::string::npos)
        << r.violation;
  }
}

}  // namespace
}  // namespace dynatrain::plan
