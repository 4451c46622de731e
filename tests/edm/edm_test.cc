// The elastic device manager with ranks as threads (in-process transport): the rank order's
// groups, the communicator cache (a layout switched back to costs no creation), the prepare
// thread running while the caller communicates, a shrink that lets ranks leave and a grow that
// cannot start processes and is refused with the world unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "comm/inproc/inproc_transport.h"
#include "edm/communicators.h"
#include "edm/device_manager.h"
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
      const int size = g == Group::kTp ? c.tp : g == Group::kCp ? c.cp : g == Group::kDp ? c.dp
                     : g == Group::kPp ? c.pp : g == Group::kEp ? c.ep : g == Group::kEdp ? c.edp()
                     : g == Group::kEtp ? c.etp : g == Group::kDpCp ? c.dp * c.cp : w;
      for (const auto& [colour, n] : members) EXPECT_EQ(n, size) << text << " " << group_name(g);
    }
    EXPECT_EQ(group_colour(c, w, Group::kTp).colour, -1) << "rank outside the layout";
  }
}

TEST(CommunicatorCache, LayoutSwitchedBackToCostsNoCreation) {
  comm::run_ranks(4, [](comm::Transport& world) {
    CommunicatorCache cache;
    const std::vector<ProcessId> ids = {0, 1, 2, 3};
    auto a = cache.get(world, ids, cfg("dp=4"));
    EXPECT_EQ(cache.creations(), 7u);
    auto b = cache.get(world, ids, cfg("tp=2,dp=2"));
    EXPECT_EQ(cache.creations(), 14u);
    auto a2 = cache.get(world, ids, cfg("dp=4"));
    EXPECT_EQ(cache.creations(), 14u) << "switch back must reuse";
    EXPECT_EQ(cache.hits(), 1u);
    // etp > 1 and cp > 1 add their groups (expert TP; the dp x cp group of dense state).
    auto e = cache.get(world, ids, cfg("tp=2,cp=2,etp=2"));
    EXPECT_EQ(cache.creations(), 14u + 9u);
    EXPECT_EQ(e->group(Group::kEtp).size(), 2);
    EXPECT_EQ(e->group(Group::kDpCp).size(), 2);
    EXPECT_FALSE(a->has(Group::kEtp));
    EXPECT_EQ(a.get(), a2.get());
    // The groups are the right ones: the dp group of tp=2,dp=2 sums the ranks of one tp column.
    float v = static_cast<float>(world.rank());
    b->group(Group::kDp).all_reduce_sum(&v, 1);
    EXPECT_EQ(v, world.rank() % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f);
    // The same layout over other processes is another entry; a leaving process drops its entries.
    auto c = cache.get(world, {0, 1, 2, 7}, cfg("dp=4"));
    EXPECT_NE(c.get(), a.get());
    cache.drop_member(7);
    EXPECT_EQ(cache.size(), 3u);  // dp=4, tp=2,dp=2 and tp=2,cp=2,etp=2 over processes 0-3
  });
}

TEST(DeviceManager, PrepareRunsOnItsOwnThreadWhileTheCallerCommunicates) {
  comm::run_ranks(4, [](comm::Transport& world) {
    DeviceManager edm(world, nullptr);
    auto training = world.split(0, world.rank());  // stands in for the training's groups
    std::atomic<bool> ran{false};
    const auto caller = std::this_thread::get_id();
    edm.prepare(cfg("dp=4"), cfg("tp=2,dp=2"), [&](const Prepared& p) {
      EXPECT_NE(std::this_thread::get_id(), caller);
      EXPECT_TRUE(p.refused.empty());
      ran = true;
    });
    EXPECT_TRUE(edm.preparing());
    float sum = 0;
    for (int i = 0; i < 50; ++i) {  // "steps" on the caller's thread, concurrent with the prepare
      float v = 1;
      training->all_reduce_sum(&v, 1);
      sum += v;
    }
    EXPECT_EQ(sum, 200.0f);
    Prepared& p = edm.wait_prepared();
    EXPECT_TRUE(ran);
    EXPECT_EQ(p.creations, 7u);
    EXPECT_EQ(p.world_before, 4);
    EXPECT_EQ(p.world_after, 4);
    ASSERT_NE(p.comms, nullptr);
    EXPECT_EQ(p.comms->group(Group::kTp).size(), 2);
    EXPECT_GE(p.hidden_seconds, 0.0);
    EXPECT_LE(p.hidden_seconds, p.seconds);
    edm.adopt();
    EXPECT_FALSE(edm.preparing());
  });
}

TEST(DeviceManager, ShrinkLetsRanksLeaveAndAGrowThatCannotStartIsRefused) {
  std::mutex mu;
  std::vector<int> left;
  comm::run_ranks(4, [&](comm::Transport& world) {
    DeviceManager edm(world, std::make_shared<InprocLauncher>());
    edm.prepare(cfg("dp=4"), cfg("dp=2"), [](const Prepared&) {});
    Prepared& p = edm.wait_prepared();
    EXPECT_EQ(p.leaving, world.rank() >= 2);
    EXPECT_EQ(p.world_after, 2);
    edm.adopt();
    if (edm.left()) {
      std::lock_guard<std::mutex> lock(mu);
      left.push_back(world.rank());
      return;
    }
    EXPECT_EQ(edm.world().size(), 2);
    EXPECT_EQ(edm.ids(), (std::vector<ProcessId>{0, 1}));
    edm.prepare(cfg("dp=2"), cfg("dp=4"), [](const Prepared&) { ADD_FAILURE() << "refused work ran"; });
    Prepared& q = edm.wait_prepared();
    EXPECT_NE(q.refused.find("cannot start 2 process(es)"), std::string::npos) << q.refused;
    edm.discard();
    EXPECT_EQ(edm.world().size(), 2);
    edm.world().barrier();  // the smaller world still works
  });
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<int>{2, 3}));
}

}  // namespace
}  // namespace dynatrain::edm
