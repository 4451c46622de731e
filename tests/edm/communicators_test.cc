// edm/communicators.h with ranks as threads: a layout switched back to costs no creation.
#include <gtest/gtest.h>

#include <vector>

#include "comm/inproc/inproc_transport.h"
#include "edm/communicators.h"

namespace dynatrain::edm {
namespace {

vps::ParallelConfig cfg(const std::string& s) { return vps::ParallelConfig::parse(s); }

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

}  // namespace
}  // namespace dynatrain::edm
