// The link-aware lower bound of a switch on a described cluster: what no execution of the
// engine's schedule can beat, given the plan's bytes and the cluster's links.
//
// Ports (each one direction): every GPU's intra-node link (gpu_link), every GPU's PCIe link to
// its NIC (pcie), every NIC (nic, shared by the GPUs behind it). A port's time is its bytes over
// its rate. The engine exchanges with one peer per step (XOR order), steps in sequence, so a
// rank's time is also at least the sum over its peers of one message latency plus its own bytes
// over its own ports (intra-node bytes over gpu_link, inter-node bytes over pcie), in and out
// taken separately. The bound is the larger of the busiest port and the busiest rank.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "sim/cluster.h"
#include "vps/layout.h"

namespace dynatrain::sim {

struct LinkBound {
  double seconds = 0;               // the bound: max(busiest_link_seconds, busiest_rank_seconds)
  std::string busiest_link;         // e.g. "node 3 NIC 1 out", "node 0 GPU 5 PCIe in"
  double busiest_link_seconds = 0;  // its bytes over its rate
  std::uint64_t busiest_link_bytes = 0;
  int busiest_rank = 0;             // the process with the longest sequence
  double busiest_rank_seconds = 0;  // latency of its messages + its bytes over its own ports
  int busiest_rank_peers = 0;       // messages (peers) of that rank
  double latency_seconds = 0;       // the latency part of busiest_rank_seconds
  // Busiest-port time over the bound: 1 when a link is the limit, < 1 when latency and the
  // ranks' own ports are.
  double utilisation() const { return seconds > 0 ? busiest_link_seconds / seconds : 0; }
};

// From every process's plan (Planner::plan_all). Processes sit on the cluster as
// cluster.topology(plans.size()) says.
LinkBound link_lower_bound(const std::vector<plan::RankPlan>& plans,
                           const std::array<int, vps::kNumStateKinds>& elem_bytes, const Cluster& cluster);

// Readable lines: the cluster, the bound, its busiest link and rank (a note when the job needs
// more nodes than the cluster describes: the extra nodes are taken to be alike).
std::string format_link_bound(const LinkBound& bound, const Cluster& cluster, int processes);

}  // namespace dynatrain::sim
