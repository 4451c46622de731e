// Node-level fan-out (plan/fanout.h): the stages pass the checker, bytes crossing nodes drop by
// the number of receivers per node for replicated state, a tree across nodes takes the stages
// and bytes computed by hand, the rule decides by its rates, and the checker catches broken
// stages.
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "plan/checker.h"
#include "plan/fanout.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "plan/stats.h"

namespace dynatrain::plan {
namespace {

using vps::Layout;
using vps::ParallelConfig;
using vps::StateKind;

struct Switch {
  Layout src, dst;
  Topology topo;
  Planner planner;
  std::vector<RankPlan> plans;
  Switch(const std::string& model, const std::string& from, const std::string& to, int gpus_per_node,
         vps::LayoutOptions lo = {})
      : src(vps::model_from_name(model), ParallelConfig::parse(from), lo),
        dst(vps::model_from_name(model), ParallelConfig::parse(to), lo),
        topo{gpus_per_node},
        planner(src, dst, topo),
        plans(planner.plan_all()) {}
  PlanStats stats(const std::vector<RankPlan>& p) const { return compute_stats(p, src.options().elem_bytes, topo); }
};

std::uint64_t inter(const PlanStats& s, StateKind k) { return s.per_kind[static_cast<int>(k)].inter_node; }

// dp=1 -> dp=4 on 2 nodes of 2: processes 2 and 3 (node 1) each pulled the whole replica from
// process 0. With fan-out the replicated kinds (param, grad at zero=1) cross once; the ZeRO
// shards (master, moments) differ per process and still cross as before.
TEST(Fanout, DpGrowSendsReplicatedStateAcrossNodesOnce) {
  const Switch sw("tiny-dense", "dp=1", "dp=4", 2);
  const auto& eb = sw.src.options().elem_bytes;
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOn);
  ASSERT_TRUE(fp.applied) << fp.reason;
  const CheckResult ok = check_fanout(sw.src, sw.dst, fp.stages);
  EXPECT_TRUE(ok.ok) << ok.violation;

  const PlanStats before = sw.stats(sw.plans), s1 = sw.stats(fp.stages[0]), s2 = sw.stats(fp.stages[1]);
  for (StateKind k : {StateKind::kParam, StateKind::kGrad}) {
    ASSERT_GT(inter(before, k), 0u);
    EXPECT_EQ(inter(s1, k) * 2, inter(before, k)) << vps::state_kind_name(k);
  }
  for (StateKind k : {StateKind::kMaster, StateKind::kExpAvg, StateKind::kExpAvgSq})
    EXPECT_EQ(inter(s1, k), inter(before, k)) << vps::state_kind_name(k);
  EXPECT_EQ(s2.total.inter_node, 0u);  // stage 2 stays inside nodes
  EXPECT_EQ(fp.inter_node_bytes_without, before.total.inter_node);
  EXPECT_EQ(fp.inter_node_bytes, s1.total.inter_node);
  EXPECT_EQ(fp.relayed_bytes, fp.inter_node_bytes_without - fp.inter_node_bytes);
  EXPECT_EQ(fp.relayed_bytes, inter(before, StateKind::kParam) / 2 + inter(before, StateKind::kGrad) / 2);
  // Stage 2 moves exactly the relayed bytes, between processes 2 and 3 only.
  EXPECT_EQ(s2.total.intra_node, fp.relayed_bytes);
  for (const auto& p : fp.stages[1]) {
    for (const auto& [peer, v] : p.send) {
      EXPECT_TRUE(p.rank >= 2 && peer >= 2) << p.rank << " -> " << peer;
      (void)v;
    }
  }
  // Node 0 is untouched: process 1's plan is the same in stage 1.
  EXPECT_TRUE(fp.stages[0][1].recv == sw.plans[1].recv);
  EXPECT_EQ(fp.stages.size(), 2u);  // no tree: one source, one node to feed
  EXPECT_EQ(fp.tree_groups, 0u);
}

// Three processes a node: the replicated kinds cross a third as often; relays spread over the
// node's processes (least relayed bytes first), so no one process carries every group.
TEST(Fanout, ThreePerNodeCrossOnceAndRelaysSpread) {
  const Switch sw("tiny-dense", "dp=1", "dp=6", 3);
  const auto& eb = sw.src.options().elem_bytes;
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOn);
  ASSERT_TRUE(fp.applied);
  const CheckResult ok = check_fanout(sw.src, sw.dst, fp.stages);
  EXPECT_TRUE(ok.ok) << ok.violation;
  const PlanStats before = sw.stats(sw.plans), s1 = sw.stats(fp.stages[0]);
  EXPECT_EQ(inter(s1, StateKind::kParam) * 3, inter(before, StateKind::kParam));
  std::set<int> relays;
  for (const auto& p : fp.stages[1])
    if (!p.send.empty()) relays.insert(p.rank);
  EXPECT_EQ(relays, (std::set<int>{3, 4, 5}));
}

// One process a node and one new replica: no two processes of a node need the same box and
// no source feeds two nodes, nothing to relay.
TEST(Fanout, NothingToRelayLeavesThePlanAlone) {
  const Switch sw("tiny-dense", "dp=1", "dp=2", 1);
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, sw.src.options().elem_bytes, FanoutMode::kOn);
  EXPECT_FALSE(fp.applied);
  EXPECT_EQ(fp.groups, 0u);
  EXPECT_EQ(fp.tree_candidates, 0u);
  ASSERT_EQ(fp.stages.size(), 1u);
  EXPECT_EQ(fp.stages[0].size(), sw.plans.size());
  for (std::size_t p = 0; p < sw.plans.size(); ++p) EXPECT_TRUE(fp.stages[0][p].recv == sw.plans[p].recv) << p;
  EXPECT_TRUE(check_fanout(sw.src, sw.dst, fp.stages).ok);
}

// The rule: relays where the network is the slower path; not where the node's own link is
// slower, nor where the second stage's fixed cost exceeds what it saves; off means off.
TEST(Fanout, RuleRelaysOnlyWhereItSavesTime) {
  const Switch sw("tiny-dense", "dp=1", "dp=4", 2);
  const auto& eb = sw.src.options().elem_bytes;
  const FanoutPlan slow_net = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kAuto,
                                          {.intra = 100e9, .inter = 1e9, .node_inter = 1e9, .stage_seconds = 0});
  EXPECT_TRUE(slow_net.applied) << slow_net.reason;
  EXPECT_LT(slow_net.seconds_with, slow_net.seconds_without);
  const FanoutPlan slow_node = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kAuto,
                                           {.intra = 1e6, .inter = 100e9, .node_inter = 100e9, .stage_seconds = 0});
  EXPECT_FALSE(slow_node.applied) << slow_node.reason;
  EXPECT_EQ(slow_node.inter_node_bytes, slow_node.inter_node_bytes_without);
  EXPECT_EQ(slow_node.stages.size(), 1u);
  EXPECT_GT(slow_node.relayed_bytes, 0u);  // what fan-out would have saved is still reported
  // tiny-dense moves kilobytes: a 1 s second stage never pays.
  const FanoutPlan costly = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kAuto,
                                        {.intra = 100e9, .inter = 1e9, .node_inter = 1e9, .stage_seconds = 1.0});
  EXPECT_FALSE(costly.applied);
  const FanoutPlan off = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOff);
  EXPECT_FALSE(off.applied);
  EXPECT_EQ(off.reason, "off");
  EXPECT_EQ(parse_fanout_mode("auto"), FanoutMode::kAuto);
  EXPECT_STREQ(fanout_mode_name(FanoutMode::kOn), "on");
  EXPECT_THROW(parse_fanout_mode("yes"), InputError);
}

// Zeroed kinds (gradients at a step boundary) are never relayed: the engine does not move them.
TEST(Fanout, ZeroedKindsAreNotRelayed) {
  const Switch sw("tiny-dense", "dp=1", "dp=4", 2);
  const auto& eb = sw.src.options().elem_bytes;
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOn, {}, vps::kind_bit(StateKind::kGrad));
  ASSERT_TRUE(fp.applied);
  for (const auto& p : fp.stages[1])
    for (const auto& [peer, v] : p.recv)
      for (const auto& q : v) EXPECT_NE(q.kind, StateKind::kGrad);
  EXPECT_TRUE(check_fanout(sw.src, sw.dst, fp.stages).ok);
}

// Every relayed switch passes the checker: dense and MoE, TP / PP / EP changes, grow and
// shrink, two or three processes a node, and under a non-identity destination placement.
TEST(Fanout, StagesPassTheCheckerAcrossSwitches) {
  struct Case {
    const char *model, *from, *to;
    int gpn;
  };
  const Case cases[] = {{"tiny-dense", "tp=2", "tp=4", 2},
                        {"tiny-dense", "tp=2,pp=2", "tp=2,dp=3", 2},
                        {"tiny-moe", "ep=2,dp=2", "ep=2,dp=4", 2},
                        {"tiny-dense", "pp=2", "tp=2,dp=3", 3},
                        {"tiny-dense", "dp=4", "tp=2", 2},
                        {"tiny-moe", "tp=2", "dp=6,ep=2", 3},
                        // trees across nodes: one source, one or two a node; two sources
                        {"tiny-dense", "dp=1", "dp=4", 1},
                        {"tiny-moe", "tp=2", "dp=6,ep=2", 2},
                        {"tiny-dense", "dp=2", "dp=8", 1},
                        {"tiny-moe", "dp=2,ep=2", "dp=8,ep=2", 1}};
  for (const Case& c : cases) {
    const Switch sw(c.model, c.from, c.to, c.gpn, {.bucket_elems = 1000});
    const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, sw.src.options().elem_bytes, FanoutMode::kOn);
    const CheckResult r = check_fanout(sw.src, sw.dst, fp.stages);
    EXPECT_TRUE(r.ok) << c.from << " -> " << c.to << ": " << r.violation;
    EXPECT_EQ(fp.inter_node_bytes + (fp.applied ? fp.relayed_bytes : 0), fp.inter_node_bytes_without);
  }
  // A destination placement that puts the new replicas on node 0's processes last.
  const vps::LayoutOptions lo;
  const Layout src(vps::model_from_name("tiny-dense"), ParallelConfig::parse("dp=1"), lo);
  const Layout dst(vps::model_from_name("tiny-dense"), ParallelConfig::parse("dp=4"), lo);
  const SwitchPlacement placed{{}, Placement::parse("2,3,0,1")};
  const Planner planner(src, dst, Topology{2}, placed);
  const FanoutPlan fp = plan_fanout(planner, planner.plan_all(), lo.elem_bytes, FanoutMode::kOn);
  ASSERT_TRUE(fp.applied);
  const CheckResult r = check_fanout(src, dst, fp.stages, placed);
  EXPECT_TRUE(r.ok) << r.violation;
}

// Bytes of every segment `rl` holds (padding excluded).
std::uint64_t held_bytes(const vps::RankLayout& rl, const vps::ElemBytes& eb) {
  std::uint64_t n = 0;
  for (const auto& buf : rl.buffers)
    for (const auto& seg : buf.segments)
      n += static_cast<std::uint64_t>(seg.box.numel()) * eb[static_cast<int>(buf.kind)];
  return n;
}

const vps::LayoutOptions kParamsOnly{.kinds = {StateKind::kParam}};

// One source feeding R nodes (dp=1 -> dp=R+1, one process a node, weights only: every receiver
// needs the whole replica, P bytes). The binomial tree, receivers sending before the source:
//   R=2: s1 0->a; s2 a->b                                    2 stages, source 1 P, busiest 1 P
//   R=3: s1 0->a; s2 a->b, 0->c                              2 stages, source 2 P, busiest 2 P
//   R=4: s1 0->a; s2 a->b, 0->c; s3 a->d                     3 stages, source 2 P, busiest 2 P
//   R=7: s1 0->a; s2 a->b, 0->c; s3 a->d, b->e, c->f, 0->g   3 stages, source 3 P, busiest 3 P
// Without: one stage, the source sends R P. The bytes crossing nodes stay R P either way.
TEST(FanoutTree, StageCountsAndBytesByHand) {
  struct Case {
    int receivers;
    std::size_t stages;
    std::uint64_t source_copies, busiest_copies, receiver_hops;
  };
  const Case cases[] = {{1, 1, 1, 1, 0}, {2, 2, 1, 1, 1}, {3, 2, 2, 2, 1}, {4, 3, 2, 2, 2}, {7, 3, 3, 3, 4}};
  for (const Case& c : cases) {
    const Switch sw("tiny-dense", "dp=1", "dp=" + std::to_string(c.receivers + 1), 1, kParamsOnly);
    const auto& eb = sw.src.options().elem_bytes;
    const std::uint64_t replica = held_bytes(sw.planner.dst_rank_layout(1), eb);
    ASSERT_GT(replica, 0u);
    const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOn);
    const std::string r = "R=" + std::to_string(c.receivers);
    EXPECT_EQ(fp.applied, c.receivers >= 2) << r;
    EXPECT_EQ(fp.stages.size(), c.stages) << r;
    EXPECT_EQ(fp.groups, 0u) << r;  // one process a node: nothing to relay inside a node
    EXPECT_EQ(fp.inter_node_bytes_without, c.receivers * replica) << r;
    EXPECT_EQ(fp.inter_node_bytes, c.receivers * replica) << r;
    EXPECT_EQ(fp.max_sender_bytes_without, c.receivers * replica) << r;
    EXPECT_EQ(fp.max_sender_bytes, c.busiest_copies * replica) << r;
    EXPECT_EQ(fp.tree_bytes, c.receiver_hops * replica) << r;
    // The source's sends over all stages.
    std::uint64_t source = 0;
    for (const auto& stage : fp.stages) source += inter_node_bytes_out(stage[0], sw.topo, eb);
    EXPECT_EQ(source, c.source_copies * replica) << r;
    if (c.receivers >= 2) {
      EXPECT_EQ(fp.tree_groups, fp.tree_candidates) << r;
    }
    const CheckResult ok = check_fanout(sw.src, sw.dst, fp.stages);
    EXPECT_TRUE(ok.ok) << r << ": " << ok.violation;
  }
}

// The rule: a tree group takes its tree when its network stages are fewer than its R copies
// through the source's port (stages x bytes over the link vs R x bytes), so R=2 never does (two
// hops of P take as long as two copies); then the whole switch's estimate, with each later
// stage's fixed cost once, decides: R=3 pays when that cost is small, the default 2 ms does not
// pay for kilobytes.
TEST(FanoutTree, RuleTakesATreeOnlyWhereItSavesTime) {
  const FanoutCosts free_stages{.intra = 100e9, .inter = 1e9, .node_inter = 1e9, .stage_seconds = 0};
  {
    const Switch sw("tiny-dense", "dp=1", "dp=3", 1, kParamsOnly);
    const FanoutPlan fp =
        plan_fanout(sw.planner, sw.plans, sw.src.options().elem_bytes, FanoutMode::kAuto, free_stages);
    EXPECT_FALSE(fp.applied) << fp.reason;
    EXPECT_GT(fp.tree_candidates, 0u);
    EXPECT_NE(fp.reason.find("not relayed"), std::string::npos) << fp.reason;
  }
  const Switch sw("tiny-dense", "dp=1", "dp=4", 1, kParamsOnly);
  const auto& eb = sw.src.options().elem_bytes;
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kAuto, free_stages);
  ASSERT_TRUE(fp.applied) << fp.reason;
  EXPECT_EQ(fp.tree_groups, fp.tree_candidates);
  EXPECT_EQ(fp.stages.size(), 2u);
  EXPECT_LT(fp.seconds_with, fp.seconds_without);
  EXPECT_NE(fp.reason.find("tree groups"), std::string::npos) << fp.reason;
  EXPECT_FALSE(plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kAuto).applied);  // 2 ms a stage
  EXPECT_FALSE(plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOff).applied);
}

// Two processes a node, three nodes (dp=1 -> dp=6): the relays of nodes 1 and 2 are one
// source's two receivers; stage 1 the source feeds node 1's relay, stage 2 that relay feeds
// node 2's, stage 3 every relay feeds its node. Crossing nodes: 2 P (4 P without); the busiest
// sender to other nodes: P (the source: 4 P without).
TEST(FanoutTree, RelaysOfThreeNodesTakeATree) {
  const Switch sw("tiny-dense", "dp=1", "dp=6", 2, kParamsOnly);
  const auto& eb = sw.src.options().elem_bytes;
  const std::uint64_t replica = held_bytes(sw.planner.dst_rank_layout(1), eb);
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, eb, FanoutMode::kOn);
  ASSERT_TRUE(fp.applied) << fp.reason;
  ASSERT_EQ(fp.stages.size(), 3u);
  EXPECT_EQ(fp.tree_groups, fp.groups / 2);  // one tree per box, one relay group per box and node
  EXPECT_EQ(fp.inter_node_bytes_without, 4 * replica);
  EXPECT_EQ(fp.inter_node_bytes, 2 * replica);
  EXPECT_EQ(fp.max_sender_bytes_without, 4 * replica);
  EXPECT_EQ(fp.max_sender_bytes, replica);
  const PlanStats s2 = sw.stats(fp.stages[1]), s3 = sw.stats(fp.stages[2]);
  EXPECT_EQ(s2.total.inter_node, replica);  // node 1's relays to node 2's
  EXPECT_EQ(s2.total.intra_node, 0u);
  EXPECT_EQ(s3.total.inter_node, 0u);  // inside nodes only
  EXPECT_EQ(s3.total.intra_node, 2 * replica);
  const CheckResult ok = check_fanout(sw.src, sw.dst, fp.stages);
  EXPECT_TRUE(ok.ok) << ok.violation;
}

// A third stage in which a process sends a box that it receives only in that same stage (no
// earlier stage gave it): the stage alone is still an exact cover, the tracing catches it.
TEST(FanoutTree, CheckerRejectsABrokenThirdStage) {
  const Switch sw("tiny-dense", "dp=1", "dp=8", 1, kParamsOnly);
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, sw.src.options().elem_bytes, FanoutMode::kOn);
  ASSERT_EQ(fp.stages.size(), 3u);
  ASSERT_TRUE(check_fanout(sw.src, sw.dst, fp.stages).ok);
  auto stages = fp.stages;
  auto& third = stages[2];
  // A hop a -> b of the third stage, and another receiver c of the same box in that stage.
  const Piece* hop = nullptr;
  const Piece* other = nullptr;
  for (const auto& plan : third)
    for (const auto& [from, v] : plan.recv)
      for (const auto& q : v) {
        if (!hop && from != 0)
          hop = &q;
        else if (hop && !other && q.tensor == hop->tensor && q.box == hop->box && q.dst_rank != hop->dst_rank &&
                 q.dst_rank != hop->src_rank)
          other = &q;
      }
  ASSERT_TRUE(hop && other);
  const Piece before = *hop;
  Piece after = before;  // c sends b the box from the segment c receives it into in this stage
  after.src_rank = other->dst_rank;
  after.src_buffer = other->dst_buffer;
  after.src_segment = other->dst_segment;
  std::erase(third[before.src_rank].send[before.dst_rank], before);
  if (third[before.src_rank].send[before.dst_rank].empty()) third[before.src_rank].send.erase(before.dst_rank);
  std::erase(third[before.dst_rank].recv[before.src_rank], before);
  if (third[before.dst_rank].recv[before.src_rank].empty()) third[before.dst_rank].recv.erase(before.src_rank);
  third[after.src_rank].send[after.dst_rank].push_back(after);
  third[after.dst_rank].recv[after.src_rank].push_back(after);
  for (auto* v : {&third[after.src_rank].send[after.dst_rank], &third[after.dst_rank].recv[after.src_rank]})
    std::sort(v->begin(), v->end(), piece_order);
  EXPECT_TRUE(check_plan(sw.dst, sw.dst, third).ok);  // the stage alone looks fine
  const CheckResult r = check_fanout(sw.src, sw.dst, stages);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.violation.find("stage 3"), std::string::npos) << r.violation;
  EXPECT_NE(r.violation.find("no earlier stage"), std::string::npos) << r.violation;
}

// Stages that break the contract are caught, each with what is wrong.
TEST(Fanout, CheckerRejectsBrokenStages) {
  const Switch sw("tiny-dense", "dp=1", "dp=4", 2);
  const FanoutPlan fp = plan_fanout(sw.planner, sw.plans, sw.src.options().elem_bytes, FanoutMode::kOn);
  ASSERT_TRUE(fp.applied);
  auto expect_bad = [&](const std::vector<RankPlan>& s1, const std::vector<RankPlan>& s2, const char* what) {
    const CheckResult r = check_fanout(sw.src, sw.dst, {s1, s2});
    EXPECT_FALSE(r.ok) << what;
    EXPECT_FALSE(r.violation.empty()) << what;
  };
  // Stage 1 still holding the relayed receives: those elements are written twice.
  expect_bad(sw.plans, fp.stages[1], "relayed receives left in stage 1");
  // A relayed piece dropped from stage 2 (both sides): a hole stays.
  {
    auto s2 = fp.stages[1];
    int relay = -1, to = -1;
    for (const auto& p : s2)
      if (!p.send.empty()) relay = p.rank, to = p.send.begin()->first;
    ASSERT_GE(relay, 0);
    s2[relay].send[to].pop_back();
    s2[to].recv[relay].pop_back();
    expect_bad(fp.stages[0], s2, "relayed piece dropped");
  }
  // Two processes that feed each other in stage 2 while stage 1 gives the box to neither: stage 2
  // alone is an exact cover, but nothing real stands behind it.
  {
    auto s1 = fp.stages[0];
    auto s2 = fp.stages[1];
    int relay = -1, to = -1;
    for (const auto& p : s2)
      if (!p.send.empty()) relay = p.rank, to = p.send.begin()->first;
    ASSERT_GE(relay, 0);
    const Piece q = s2[relay].send[to].front();  // relay -> to, from the relay's segment
    // The relay's own stage-1 receive of that box goes, and its whole-segment stage-2 keep.
    Piece fed;
    bool found = false;
    for (auto& [src, v] : s1[relay].recv)
      for (const auto& p : v)
        if (p.box == q.box && p.tensor == q.tensor && p.kind == q.kind) fed = p, found = true;
    ASSERT_TRUE(found);
    std::erase(s1[relay].recv[fed.src_rank], fed);
    std::erase(s1[fed.src_rank].send[relay], fed);
    const auto removed = std::erase_if(s2[relay].keep, [&](const Piece& k) {
      return k.dst_buffer == q.src_buffer && k.dst_segment == q.src_segment && k.box == q.box;
    });
    ASSERT_EQ(removed, 1u);
    Piece back = q;
    back.src_rank = to, back.src_buffer = q.dst_buffer, back.src_segment = q.dst_segment;
    back.dst_rank = relay, back.dst_buffer = q.src_buffer, back.dst_segment = q.src_segment;
    s2[to].send[relay].push_back(back);
    s2[relay].recv[to].push_back(back);
    for (auto* v : {&s2[to].send[relay], &s2[relay].recv[to]}) std::sort(v->begin(), v->end(), piece_order);
    EXPECT_TRUE(check_plan(sw.dst, sw.dst, s2).ok);  // stage 2 alone looks fine
    expect_bad(s1, s2, "relays feeding each other");
  }
  // A stage-2 keep that reads another segment than it writes.
  {
    auto s2 = fp.stages[1];
    ASSERT_GT(s2[2].keep.size(), 1u);
    s2[2].keep[1].src_segment = s2[2].keep[0].src_segment;
    s2[2].keep[1].src_buffer = s2[2].keep[0].src_buffer;
    expect_bad(fp.stages[0], s2, "non-identity keep");
  }
}

}  // namespace
}  // namespace dynatrain::plan
