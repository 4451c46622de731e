// sim/link_bound.h on hand-computed cases: a NIC shared by two GPUs limits both, and each peer
// costs one latency in sequence.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "sim/cluster.h"
#include "sim/link_bound.h"

namespace dynatrain::sim {
namespace {

// A cluster with round numbers: 2 GPUs per node, rates in bytes/s, no latency.
Cluster toy(int nics_per_node) {
  Cluster c;
  c.name = "toy";
  c.nodes = 2;
  c.gpus_per_node = 2;
  c.gpu_link = 100;
  c.nics_per_node = nics_per_node;
  c.nic = 10;
  c.pcie = 8;
  c.copy = 1000;
  return c;
}

// `processes` empty plans, then process `from` sends `elems` bf16 params to each of `to`.
std::vector<plan::RankPlan> plans_of(int processes) {
  std::vector<plan::RankPlan> plans(processes);
  for (int p = 0; p < processes; ++p) plans[p].rank = p;
  return plans;
}
void send(std::vector<plan::RankPlan>& plans, int from, int to, std::int64_t elems) {
  plan::Piece piece;
  piece.box = vps::Box::of_shape({elems});
  piece.src_rank = from;
  piece.dst_rank = to;
  plans[from].send[to].push_back(piece);
  plans[to].recv[from].push_back(piece);
}
const std::array<int, vps::kNumStateKinds> kElemBytes{2, 2, 4, 4, 4};

TEST(LinkBound, TwoGpusSharingANicAreLimitedByIt) {
  // Processes 0 and 1 (node 0) each send 80 bytes to node 1: each PCIe link takes 80/8 = 10 s,
  // the one NIC they share carries 160 bytes at 10 B/s = 16 s.
  auto plans = plans_of(4);
  send(plans, 0, 2, 40);
  send(plans, 1, 3, 40);
  const LinkBound shared = link_lower_bound(plans, kElemBytes, toy(1));
  EXPECT_DOUBLE_EQ(shared.seconds, 16);
  EXPECT_EQ(shared.busiest_link, "node 0 NIC 0 out");
  EXPECT_EQ(shared.busiest_link_bytes, 160u);
  EXPECT_DOUBLE_EQ(shared.busiest_rank_seconds, 10);
  EXPECT_DOUBLE_EQ(shared.utilisation(), 1);
  // One NIC per GPU: each NIC carries 80 bytes (8 s), so the PCIe links (10 s) are the limit.
  const LinkBound own = link_lower_bound(plans, kElemBytes, toy(2));
  EXPECT_DOUBLE_EQ(own.seconds, 10);
  EXPECT_EQ(own.busiest_link, "node 0 GPU 0 PCIe out");
}

TEST(LinkBound, EachPeerCostsOneLatencyInSequence) {
  // Process 0 sends 50 bytes to its node-mate 1 and 8 bytes to each of 2 and 3 (node 1).
  auto plans = plans_of(4);
  send(plans, 0, 1, 25);
  send(plans, 0, 2, 4);
  send(plans, 0, 3, 4);
  Cluster c = toy(2);
  c.intra_latency = 0.5;
  c.inter_latency = 2;
  const LinkBound b = link_lower_bound(plans, kElemBytes, c);
  // Rank 0: latency 0.5 + 2 + 2, bytes 50/100 + 16/8 out = 2.5 s: 7 s. Busiest port: its PCIe,
  // 16 bytes / 8 = 2 s; utilisation 2/7.
  EXPECT_EQ(b.busiest_rank, 0);
  EXPECT_EQ(b.busiest_rank_peers, 3);
  EXPECT_DOUBLE_EQ(b.latency_seconds, 4.5);
  EXPECT_DOUBLE_EQ(b.seconds, 7);
  EXPECT_DOUBLE_EQ(b.busiest_link_seconds, 2);
  EXPECT_NEAR(b.utilisation(), 2.0 / 7, 1e-12);
}

}  // namespace
}  // namespace dynatrain::sim
