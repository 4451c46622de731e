// edm/rank_order.h: ranks share a group of a kind exactly when every other coordinate agrees.
#include <gtest/gtest.h>

#include <vector>

#include "edm/rank_order.h"

namespace dynatrain::edm {
namespace {

vps::ParallelConfig cfg(const std::string& s) { return vps::ParallelConfig::parse(s); }

// The coordinates that must agree inside a group of kind g, and g's own coordinate.
std::vector<int> others(const vps::ParallelConfig& c, const vps::RankCoords& k, Group g) {
  switch (g) {
    case Group::kTp: return {k.cp, k.dp, k.pp};
    case Group::kCp: return {k.tp, k.dp, k.pp};
    case Group::kDp: return {k.tp, k.cp, k.pp};
    case Group::kPp: return {k.tp, k.cp, k.dp};
    case Group::kEp: return {k.etp, k.edp, k.pp};
    case Group::kEdp: return {k.etp, k.ep, k.pp};
    case Group::kEtp: return {k.cp, k.dp, k.pp, k.tp / c.etp};
    case Group::kDpCp: return {k.tp, k.pp};
    case Group::kActive: return {};
  }
  return {};
}
int own(const vps::ParallelConfig& c, const vps::RankCoords& k, Group g, int rank) {
  switch (g) {
    case Group::kTp: return k.tp;
    case Group::kCp: return k.cp;
    case Group::kDp: return k.dp;
    case Group::kPp: return k.pp;
    case Group::kEp: return k.ep;
    case Group::kEdp: return k.edp;
    case Group::kEtp: return k.tp % c.etp;
    case Group::kDpCp: return k.dense_shard;
    case Group::kActive: return rank;
  }
  return -1;
}

TEST(RankOrder, SameColourExactlyWhenOtherCoordinatesAgree) {
  for (const char* text : {"tp=2,pp=2,dp=2", "tp=2,cp=2,dp=3", "pp=3,dp=2,ep=2", "tp=2,dp=4,ep=4,pp=2", "dp=1",
                           "tp=4,cp=2,dp=2,ep=2,etp=2,pp=2"}) {
    const auto c = cfg(text);
    const int w = c.world_size();
    EXPECT_EQ(groups_needed(c), 7 + (c.etp > 1 ? 1 : 0) + (c.cp > 1 ? 1 : 0)) << text;
    for (Group g : kAllGroups) {
      if (!group_needed(c, g)) continue;
      std::map<int, int> members;  // colour -> count
      for (int a = 0; a < w; ++a) {
        const auto ka = vps::rank_coords(c, a);
        const Colour ca = group_colour(c, a, g);
        ASSERT_GE(ca.colour, 0) << text << " " << group_name(g);
        EXPECT_EQ(ca.key, own(c, ka, g, a)) << text << " " << group_name(g) << " rank " << a;
        ++members[ca.colour];
        for (int b = 0; b < w; ++b) {
          const bool same = group_colour(c, b, g).colour == ca.colour;
          EXPECT_EQ(same, others(c, vps::rank_coords(c, b), g) == others(c, ka, g))
              << text << " " << group_name(g) << " ranks " << a << ", " << b;
        }
      }
      const int size = g == Group::kTp     ? c.tp
                       : g == Group::kCp   ? c.cp
                       : g == Group::kDp   ? c.dp
                       : g == Group::kPp   ? c.pp
                       : g == Group::kEp   ? c.ep
                       : g == Group::kEdp  ? c.edp()
                       : g == Group::kEtp  ? c.etp
                       : g == Group::kDpCp ? c.dp * c.cp
                                           : w;
      for (const auto& [colour, n] : members) EXPECT_EQ(n, size) << text << " " << group_name(g);
    }
    EXPECT_EQ(group_colour(c, w, Group::kTp).colour, -1) << "rank outside the layout";
  }
}

}  // namespace
}  // namespace dynatrain::edm
