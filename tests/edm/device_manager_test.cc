// edm/device_manager.h with ranks as threads (in-process transport): the prepare thread runs
// while the caller communicates; a shrink lets ranks leave, and a grow that cannot start
// processes is refused with the world unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "comm/inproc/inproc_transport.h"
#include "edm/device_manager.h"

namespace dynatrain::edm {
namespace {

vps::ParallelConfig cfg(const std::string& s) { return vps::ParallelConfig::parse(s); }

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
