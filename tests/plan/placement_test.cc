// Placement: which process takes which rank (plan/placement.h). Plans under a placement must
// pass the checker under that placement, and auto placement must beat fixed where it can.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <random>

#include "common/error.h"
#include "plan/checker.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "plan/stats.h"

namespace dynatrain::plan {
namespace {

using vps::Layout;
using vps::ParallelConfig;

// ZeRO buckets of `elems` elements, so tiny models get several buckets per kind.
vps::LayoutOptions buckets_of(std::int64_t elems) { return {.bucket_elems = elems}; }

std::vector<RankPlan> plan_with(const Layout& src, const Layout& dst, Topology topo, SwitchPlacement placement) {
  return Planner(src, dst, topo, std::move(placement)).plan_all();
}

TEST(Assignment, FindsTheHandComputedOptimum) {
  // Rows 0..2 on columns 0..3. Greedy row by row takes (0,0)=1, (1,1)=1, then row 2 pays 9;
  // the optimum is 0->1 (2), 1->3 (3), 2->0 (1) = 6 (greedy total 11).
  const std::vector<std::int64_t> cost = {1, 2, 7, 8, 6, 1, 9, 3, 1, 9, 9, 9};
  EXPECT_EQ(min_cost_assignment(3, 4, cost), (std::vector<int>{1, 3, 0}));
  // Square, identity optimal.
  EXPECT_EQ(min_cost_assignment(2, 2, {0, 5, 5, 0}), (std::vector<int>{0, 1}));
}

TEST(Placement, ParsesPrintsAndValidates) {
  EXPECT_TRUE(Placement::parse("fixed").is_identity());
  EXPECT_TRUE(Placement::parse("0,1,2").is_identity());  // the identity spelled out
  const Placement p = Placement::parse("2,0,1");
  EXPECT_EQ(p.str(), "2,0,1");
  EXPECT_EQ(p.process_of(0), 2);
  EXPECT_EQ(p.rank_of(2, 3), 0);
  EXPECT_EQ(p.rank_of(3, 3), -1);
  EXPECT_EQ(p.moved_ranks(3), 3);
  EXPECT_NO_THROW(p.validate(3, 4));
  EXPECT_THROW(Placement::parse("1,x"), InputError);
  EXPECT_THROW(Placement::parse("1,-2"), InputError);
  EXPECT_THROW(Placement::parse(""), InputError);
  try {
    Placement::parse("1,1,0").validate(3, 3);
    FAIL() << "a process taking two ranks was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("puts ranks 0 and 1 on process 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Placement::parse("0,1,5").validate(3, 4), InputError);  // no process 5
  EXPECT_THROW(Placement::parse("1,0").validate(3, 4), InputError);    // too few entries
}

TEST(Placement, PlansUnderAPlacementPassTheCheckerOnlyUnderIt) {
  const auto m = vps::model_from_name("tiny-moe");
  const Layout src(m, ParallelConfig::parse("tp=2,pp=2,ep=2,zero=1"), buckets_of(1500));
  const Layout dst(m, ParallelConfig::parse("tp=1,dp=3,pp=2,zero=1"), buckets_of(1500));
  const SwitchPlacement placed{{}, Placement::parse("5,4,3,2,1,0")};
  const Planner planner(src, dst, Topology{2}, placed);
  const auto plans = planner.plan_all();
  EXPECT_TRUE(check_plan(src, dst, plans, placed).ok);
  EXPECT_FALSE(check_plan(src, dst, plans).ok);  // the same plan read as if ranks sat on their own process
  for (int p : {0, 2, 5}) {
    const auto mine = planner.plan_rank(p);
    EXPECT_EQ(mine.keep, plans[p].keep) << "process " << p;
    EXPECT_EQ(mine.send, plans[p].send) << "process " << p;
    EXPECT_EQ(mine.recv, plans[p].recv) << "process " << p;
  }
  // A source placement too: both sides permuted.
  const SwitchPlacement both{Placement::parse("3,0,1,2"), Placement::parse("1,0,3,2,5,4")};
  EXPECT_TRUE(check_plan(src, dst, plan_with(src, dst, Topology{2}, both), both).ok);
}

// Random placements on both sides of varied switches (grow, shrink, MoE, ZeRO stages): every
// plan is an exact cover under its placement, and one process's own plan equals its part of
// the whole.
TEST(Placement, RandomPlacementsGiveExactCovers) {
  const std::vector<std::array<const char*, 3>> switches = {
      {"tiny-dense", "tp=2,pp=2,zero=1", "tp=1,dp=3,zero=2"},
      {"tiny-dense", "dp=3,zero=3", "tp=2,pp=2,dp=1,zero=1"},
      {"tiny-moe", "tp=2,dp=2,ep=2,zero=1", "tp=1,pp=2,dp=4,ep=4,zero=1"},
      {"tiny-moe", "pp=3,pp_layers=2/1/1,dp=2,ep=2,zero=0", "tp=2,dp=2,ep=4,zero=3"}};
  std::mt19937 rng(7);
  for (const auto& [model, from, to] : switches) {
    const auto m = vps::model_from_name(model);
    const Layout src(m, ParallelConfig::parse(from), buckets_of(900));
    const Layout dst(m, ParallelConfig::parse(to), buckets_of(900));
    const int processes = std::max(src.config().world_size(), dst.config().world_size());
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int> perm(processes);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int> src_map(perm.begin(), perm.begin() + src.config().world_size());
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int> dst_map(perm.begin(), perm.begin() + dst.config().world_size());
      const SwitchPlacement placed{Placement(src_map), Placement(dst_map)};
      const Planner planner(src, dst, Topology{2}, placed);
      const auto plans = planner.plan_all();
      const auto result = check_plan(src, dst, plans, placed);
      EXPECT_TRUE(result.ok) << from << " -> " << to << " placed " << placed.src.str() << " / " << placed.dst.str()
                             << ": " << result.violation;
      const int p = static_cast<int>(rng() % processes);
      const auto mine = planner.plan_rank(p);
      EXPECT_EQ(mine.keep, plans[p].keep) << "process " << p;
      EXPECT_EQ(mine.send, plans[p].send) << "process " << p;
      EXPECT_EQ(mine.recv, plans[p].recv) << "process " << p;
    }
  }
}

TEST(Placement, LeavingProcessesEndEmptyAndJoiningOnesStartEmpty) {
  const auto m = vps::model_from_name("tiny-dense");
  const Layout big(m, ParallelConfig::parse("tp=2,dp=2,zero=1"), buckets_of(1000));
  const Layout small(m, ParallelConfig::parse("tp=2,zero=1"), buckets_of(1000));
  // Shrink 4 -> 2 onto processes 3 and 1: processes 0 and 2 leave, so they receive nothing.
  const SwitchPlacement shrink{{}, Placement::parse("3,1")};
  const auto down = plan_with(big, small, Topology{8}, shrink);
  EXPECT_TRUE(check_plan(big, small, down, shrink).ok);
  for (int p : {0, 2}) EXPECT_TRUE(down[p].keep.empty() && down[p].recv.empty()) << "process " << p;
  // Grow 2 -> 4 from processes 3 and 1: processes 0 and 2 join, so they send nothing.
  const SwitchPlacement grow{Placement::parse("3,1"), {}};
  const auto up = plan_with(small, big, Topology{8}, grow);
  EXPECT_TRUE(check_plan(small, big, up, grow).ok);
  for (int p : {0, 2}) EXPECT_TRUE(up[p].keep.empty() && up[p].send.empty()) << "process " << p;
}

TEST(Placement, PlaceAroundKeepsRanksOffVacatedProcesses) {
  // Rank r stays on process r unless vacated; the rest take free processes in order, new ones last.
  EXPECT_EQ(place_around(2, 3, {1}), (std::vector<int>{0, 2}));
  EXPECT_EQ(place_around(2, 3, {0}), (std::vector<int>{2, 1}));
  EXPECT_EQ(place_around(3, 5, {0, 2}), (std::vector<int>{3, 1, 4}));  // 2 processes started at 3, 4
  EXPECT_EQ(place_around(3, 4, {3}), (std::vector<int>{0, 1, 2}));     // the identity: the vacated one is beyond
  EXPECT_THROW(place_around(3, 3, {1}), InvariantError);               // does not fit
  EXPECT_THROW(place_around(2, 3, {3}), InvariantError);               // no such process
}

TEST(AutoPlacement, UndoesAPermutedSourceSoEverythingStaysInPlace) {
  // The running job holds source rank r on process perm[r]; the destination config equals the
  // source config. Fixed placement moves every ZeRO shard; auto finds perm and keeps all.
  const auto m = vps::model_from_name("tiny-dense");
  const Layout layout(m, ParallelConfig::parse("tp=2,dp=2,zero=1"), buckets_of(700));
  const Placement perm = Placement::parse("1,0,3,2");
  const Topology topo{2};
  const Placement chosen = auto_placement(layout, layout, topo, perm);
  EXPECT_EQ(chosen, perm);
  const SwitchPlacement fixed{perm, {}}, placed{perm, chosen};
  const auto fixed_stats = compute_stats(plan_with(layout, layout, topo, fixed), layout.options().elem_bytes, topo);
  const auto plans = plan_with(layout, layout, topo, placed);
  const auto auto_stats = compute_stats(plans, layout.options().elem_bytes, topo);
  EXPECT_GT(fixed_stats.total.intra_node, 0u);
  EXPECT_EQ(auto_stats.total.intra_node + auto_stats.total.inter_node, 0u);
  EXPECT_EQ(auto_stats.messages, 0u);
  EXPECT_TRUE(check_plan(layout, layout, plans, placed).ok);

  // With rank 0 pinned to process 0 (the trainer's rule), the rest is still solved: the tp
  // partner of the pinned rank and the other dp replica stay where they are held (fewer bytes
  // move than under fixed placement), and the plan is an exact cover.
  const Placement pinned = auto_placement(layout, layout, topo, perm, {}, {}, /*rank0_on_process0=*/true);
  EXPECT_EQ(pinned.process_of(0), 0);
  EXPECT_EQ(pinned, Placement::parse("0,1,3,2"));
  const SwitchPlacement pinned_placed{perm, pinned};
  const auto pinned_plans = plan_with(layout, layout, topo, pinned_placed);
  const auto pinned_stats = compute_stats(pinned_plans, layout.options().elem_bytes, topo);
  EXPECT_LT(pinned_stats.total.intra_node + pinned_stats.total.inter_node,
            fixed_stats.total.intra_node + fixed_stats.total.inter_node);
  EXPECT_TRUE(check_plan(layout, layout, pinned_plans, pinned_placed).ok);
  EXPECT_THROW(auto_placement(layout, layout, topo, perm, {}, {1, 2, 3, 4}, true), InputError);
}

TEST(AutoPlacement, OnlyEligibleProcessesTakeRanks) {
  // Shrink 4 -> 2 where processes 0 and 1 must leave (their node is drained): the two new
  // ranks go to processes 2 and 3, and the plan is still an exact cover.
  const auto m = vps::model_from_name("tiny-dense");
  const Layout big(m, ParallelConfig::parse("tp=2,dp=2,zero=1"), buckets_of(700));
  const Layout small(m, ParallelConfig::parse("tp=2,zero=1"), buckets_of(700));
  const Placement chosen = auto_placement(big, small, Topology{2}, {}, {}, {2, 3});
  EXPECT_EQ(chosen, Placement::parse("2,3"));  // tp rank r of the new layout on the old tp rank r
  const SwitchPlacement placed{{}, chosen};
  const auto plans = plan_with(big, small, Topology{2}, placed);
  EXPECT_TRUE(check_plan(big, small, plans, placed).ok);
  // The floor over placements onto processes 2 and 3 only is what auto reaches.
  EXPECT_EQ(compute_stats(plans, big.options().elem_bytes, Topology{2}).total.inter_node,
            inter_node_floor(Planner(big, small, Topology{2}).affinity(), Topology{2}, {2, 3}));
  // Unconstrained, the shrink keeps the ranks where they are.
  EXPECT_TRUE(auto_placement(big, small, Topology{2}).is_identity());
  EXPECT_THROW(auto_placement(big, small, Topology{2}, {}, {}, {3}), InputError);
  EXPECT_THROW(auto_placement(big, small, Topology{2}, {}, {}, {1, 7}), InputError);
}

TEST(AutoPlacement, KeepsTheIdentityWhenNothingIsGained) {
  const auto m = vps::model_from_name("tiny-moe");
  const Layout layout(m, ParallelConfig::parse("tp=2,dp=2,ep=2,zero=0"), buckets_of(1000));
  EXPECT_TRUE(auto_placement(layout, layout, Topology{2}).is_identity());
}

// Auto weighs what a rank's node holds, not only what one process keeps. dp=6 -> dp=2 on three
// nodes of two processes: destination rank 1 owns ZeRO sixths 3, 4 and 5 of every bucket,
// held by processes 3 (node 1), 4 and 5 (node 2). Processes 3, 4 and 5 each keep one sixth, so
// keeping alone cannot tell them apart; on process 3 sixths 4 and 5 cross nodes, on process 4
// only sixth 3 does (sixth 5 comes from its node partner). Rank 0 stays on process 0 and
// fetches sixth 2 across nodes either way: 2 sixths cross under auto, 3 on process 3. The same
// switch runs under mpirun in placement_mpi_test.sh.
TEST(AutoPlacement, PrefersTheNodeHoldingMostOverAProcessKeepingAsMuch) {
  const auto m = vps::model_from_name("tiny-dense");
  const Layout src(m, ParallelConfig::parse("dp=6,zero=1"), buckets_of(700));
  const Layout dst(m, ParallelConfig::parse("dp=2,zero=1"), buckets_of(700));
  const Topology topo{2};
  const Placement chosen = auto_placement(src, dst, topo);
  EXPECT_EQ(chosen, Placement::parse("0,4"));
  const SwitchPlacement node_level{{}, chosen}, keep_only{{}, Placement::parse("0,3")};
  const auto plans = plan_with(src, dst, topo, node_level);
  EXPECT_TRUE(check_plan(src, dst, plans, node_level).ok);
  const auto best = compute_stats(plans, src.options().elem_bytes, topo);
  const auto keep = compute_stats(plan_with(src, dst, topo, keep_only), src.options().elem_bytes, topo);
  EXPECT_EQ(best.total.kept, keep.total.kept);  // one sixth kept by rank 1 either way
  // Sixths differ by a few elements of bucket padding, so 2 : 3 holds to 1 %.
  EXPECT_NEAR(static_cast<double>(keep.total.inter_node) / static_cast<double>(best.total.inter_node), 1.5, 0.015);
  // Params and grads are replicated on every source process: only optimizer state crosses.
  const auto kind = [](vps::StateKind k) { return static_cast<std::size_t>(k); };
  EXPECT_EQ(best.per_kind[kind(vps::StateKind::kParam)].inter_node, 0u);
  EXPECT_EQ(best.per_kind[kind(vps::StateKind::kGrad)].inter_node, 0u);
  EXPECT_EQ(best.total.inter_node, inter_node_floor(Planner(src, dst, topo).affinity(), topo));
}

// The floor charges ranks that must sit on a node holding nothing. Grow dp=2 -> dp=4 on nodes
// of two: the source fills node 0, so two of the four destination ranks land on node 1 and
// receive all their state across nodes; the floor is the two smallest such states, and auto
// reaches it.
TEST(InterNodeFloor, ChargesRanksThatMustSitOnAnEmptyNode) {
  const auto m = vps::model_from_name("tiny-dense");
  const Layout src(m, ParallelConfig::parse("dp=2,zero=1"), buckets_of(700));
  const Layout dst(m, ParallelConfig::parse("dp=4,zero=1"), buckets_of(700));
  const Topology topo{2};
  const Affinity a = Planner(src, dst, topo).affinity();
  std::vector<std::uint64_t> need = a.need;
  std::sort(need.begin(), need.end());
  EXPECT_EQ(inter_node_floor(a, topo), need[0] + need[1]);
  const SwitchPlacement placed{{}, auto_placement(src, dst, topo)};
  const auto plans = plan_with(src, dst, topo, placed);
  EXPECT_TRUE(check_plan(src, dst, plans, placed).ok);
  EXPECT_EQ(compute_stats(plans, src.options().elem_bytes, topo).total.inter_node, need[0] + need[1]);
  // With every process on one node nothing crosses.
  EXPECT_EQ(inter_node_floor(Planner(src, dst, Topology{4}).affinity(), Topology{4}), 0u);
}

// The paper's case: llama2-70b tp8 pp4 dp4 -> tp4 pp8 dp4 on 16 nodes of 8 GPUs. Weights and
// grads already stay in their node under fixed; auto also keeps 4.5x more bytes in place and
// sends 29 % fewer across nodes (382 vs 540 GiB). No placement reaches a third of fixed's: even
// with every rank on the node holding most of its state and no limit on ranks per node, 380 GiB
// cross (inter_node_floor), because each ZeRO bucket is split dp ways and the tp4 buckets do not
// line up with the tp8 ones (docs/cluster.md).
TEST(AutoPlacement, Llama70bKeepsMoreAndCrossesNodesLessThanFixed) {
  const auto m = vps::model_from_name("llama2-70b");
  const Layout src(m, ParallelConfig::parse("tp=8,pp=4,dp=4"));
  const Layout dst(m, ParallelConfig::parse("tp=4,pp=8,dp=4"));
  const Topology topo{8};
  const Placement chosen = auto_placement(src, dst, topo);
  const auto fixed = compute_stats(Planner(src, dst, topo).plan_all(), src.options().elem_bytes, topo);
  const SwitchPlacement placed{{}, chosen};
  const auto plans = Planner(src, dst, topo, placed).plan_all();
  const auto best = compute_stats(plans, src.options().elem_bytes, topo);
  EXPECT_LE(best.total.inter_node * 100, fixed.total.inter_node * 72)
      << "auto " << best.total.inter_node << " fixed " << fixed.total.inter_node;
  EXPECT_GE(best.total.kept, fixed.total.kept * 4);
  EXPECT_LT(best.lower_bound_seconds, fixed.lower_bound_seconds);
  EXPECT_TRUE(check_plan(src, dst, plans, placed).ok);
  const std::uint64_t floor = inter_node_floor(Planner(src, dst, topo).affinity(), topo);
  EXPECT_GT(floor * 3, fixed.total.inter_node) << "floor " << floor;  // a third is out of reach
  EXPECT_LE(floor, best.total.inter_node);
  EXPECT_LE(best.total.inter_node * 100, floor * 101) << "auto " << best.total.inter_node << " floor " << floor;
}

}  // namespace
}  // namespace dynatrain::plan
