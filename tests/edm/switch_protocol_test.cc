// The pieces of a process-count change the CLI trainer and the Python module share
// (edm/vacate.h, edm/new_rank.h, edm/survivor_placement.h, edm/copy_holders.h), as pure functions.
#include <gtest/gtest.h>

#include "common/error.h"
#include "edm/copy_holders.h"
#include "edm/new_rank.h"
#include "edm/survivor_placement.h"
#include "edm/vacate.h"
#include "testing/error_message.h"

namespace dynatrain::edm {
namespace {

std::string input_error(const std::function<void()>& f) { return testing::error_message<InputError>(f); }

TEST(Vacate, ListsOutsideTheWorldOrNamedTwiceAreRefused) {
  EXPECT_EQ(vacate_problem({}, 4), "");
  EXPECT_EQ(vacate_problem({3, 0}, 4), "");
  EXPECT_EQ(vacate_problem({4}, 4), "cannot vacate rank 4: valid ranks are 0..3");
  EXPECT_EQ(vacate_problem({-1}, 4), "cannot vacate rank -1: valid ranks are 0..3");
  EXPECT_EQ(vacate_problem({1, 1}, 4), "rank 1 is named twice in vacate");
}

TEST(Vacate, RanksGoAroundTheVacatedProcesses) {
  EXPECT_FALSE(vacate_place(3, {}));  // no vacate: the caller's own placement rule
  // 3 ranks on 4 processes, process 1 vacated: ranks 0 and 2 stay, rank 1 takes process 3.
  EXPECT_EQ(vacate_place(3, {1})(4), (std::vector<int>{0, 3, 2}));
  // A grow while vacating: 4 ranks on 4 + 1 processes, 0 vacated: rank 0 takes the new process 4.
  EXPECT_EQ(vacate_place(4, {0})(5), (std::vector<int>{4, 1, 2, 3}));
  EXPECT_EQ(in_place_placement(3, 4, {1}), (std::vector<int>{0, 3, 2}));
  EXPECT_EQ(input_error([] { in_place_placement(4, 4, {1}); }),
            "a layout of 4 ranks needs 4 processes; 3 of the world's 4 stay, and this world cannot start processes");
  EXPECT_EQ(input_error([] { in_place_placement(2, 4, {1, 1}); }), "rank 1 is named twice in vacate");
}

TEST(NewRank, FromThePlacementOrNone) {
  const plan::Placement identity;
  EXPECT_EQ(new_rank_of(identity, 1, 2), 1);
  EXPECT_EQ(new_rank_of(identity, 2, 2), -1);  // beyond a shrunk layout: no rank
  const plan::Placement moved(std::vector<int>{2, 0});
  EXPECT_EQ(new_rank_of(moved, 2, 2), 0);
  EXPECT_EQ(new_rank_of(moved, 0, 2), 1);
  EXPECT_EQ(new_rank_of(moved, 1, 2), -1);  // left out by the placement
  EXPECT_EQ(held_rank_index(1, 2, 1), 1);
  EXPECT_EQ(held_rank_index(-1, 2, 1), 3);  // beyond the layout, distinct per process
  EXPECT_EQ(held_rank_index(-1, 2, 3), 5);
}

TEST(SurvivorPlacement, LostRanksSitOnGhostsAfterTheSurvivors) {
  // Ranks 0 and 2 of 4 survive as processes 1 and 0; ranks 1 and 3 sit on ghosts 2 and 3.
  const SurvivorPlacement s = survivor_placement({2, 0}, 4);
  EXPECT_EQ(s.process_of_rank, (std::vector<int>{1, 2, 0, 3}));
  EXPECT_EQ(s.lost, (std::vector<int>{2, 3}));
  EXPECT_TRUE(survivor_placement({0, 1}, 2).lost.empty());
  EXPECT_EQ(input_error([] { survivor_placement({0, 0}, 2); }), "survivor rank 0: valid are distinct ranks 0..1");
  EXPECT_EQ(input_error([] { survivor_placement({2}, 2); }), "survivor rank 2: valid are distinct ranks 0..1");
}

TEST(CopyHolders, EachRankIsCopiedOnTheNextNode) {
  // Two nodes of two: a stride of two processes, both ways.
  EXPECT_EQ(copy_holders({"a", "a", "b", "b"}), (std::vector<int>{2, 3, 0, 1}));
  // Three nodes, interleaved labels, one node smaller: its ranks are reused cyclically.
  const std::vector<int> h = copy_holders({"x", "y", "x", "z", "y", "x"});
  EXPECT_EQ(h, (std::vector<int>{1, 3, 4, 0, 3, 1}));  // x={0,2,5} -> y={1,4}; y -> z={3}; z -> x
  EXPECT_EQ(copies_kept_by(h, 3), (std::vector<int>{1, 4}));
  EXPECT_EQ(copies_kept_by(h, 2), (std::vector<int>{}));
  EXPECT_EQ(input_error([] {
              copy_holders({"n", "n"});
            }),
            "redundancy=2 needs processes on at least two nodes; all 2 processes run on node 'n' (DYNATRAIN_NODE, "
            "else the hostname): no other node can keep a copy");
}

// What a copy need not keep: the kinds a rank on another node holds the same of.
TEST(CopyHolders, KindsHeldOnOtherNodesAreTheReplicatedOnes) {
  using vps::StateKind;
  const auto model = vps::model_from_name("tiny-dense");
  const std::vector<std::string> two_nodes = {"a", "a", "b", "b"};
  const std::uint32_t unsharded = vps::kind_bit(StateKind::kParam) | vps::kind_bit(StateKind::kGrad);
  // dp=4, ZeRO-1: params and grads replicated on both nodes; master and moments sharded.
  const vps::Layout dp4(model, vps::ParallelConfig::parse("tp=1,dp=4,zero=1"));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(kinds_held_on_other_nodes(dp4, r, two_nodes), unsharded) << r;
  // dp=4, ZeRO-0: every kind replicated.
  const vps::Layout dp4z0(model, vps::ParallelConfig::parse("tp=1,dp=4,zero=0"));
  std::uint32_t every = 0;
  for (const auto kind : dp4z0.options().kinds) every |= vps::kind_bit(kind);
  EXPECT_EQ(kinds_held_on_other_nodes(dp4z0, 3, two_nodes), every);
  // tp=2 on each node, dp=2 across them: rank 2's replica is rank 0 on the other node.
  const vps::Layout tp2dp2(model, vps::ParallelConfig::parse("tp=2,dp=2,zero=1"));
  EXPECT_EQ(kinds_held_on_other_nodes(tp2dp2, 2, two_nodes), unsharded);
  // ... but with both replicas of a tp piece on one node, nothing is held elsewhere.
  EXPECT_EQ(kinds_held_on_other_nodes(tp2dp2, 2, {"a", "b", "a", "b"}), 0u);
  // tp=4 across both nodes: no replica at all.
  const vps::Layout tp4(model, vps::ParallelConfig::parse("tp=4,dp=1,zero=1"));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(kinds_held_on_other_nodes(tp4, r, two_nodes), 0u) << r;
  EXPECT_EQ(input_error([&] { kinds_held_on_other_nodes(tp4, 4, two_nodes); }),
            "kinds held on other nodes: rank 4 with nodes named for 4 ranks; valid: a rank in 0..3 and a node for "
            "each of the 4 ranks");
}

}  // namespace
}  // namespace dynatrain::edm
