#include "sim/link_bound.h"

#include <algorithm>
#include <map>
#include <cstdio>
#include <set>

namespace dynatrain::sim {

namespace {

// Bytes through one direction of every port, by the port's readable name.
struct PortLoads {
  std::map<std::string, std::pair<std::uint64_t, double>> ports;  // name -> (bytes, rate)
  void add(const std::string& name, std::uint64_t bytes, double rate) {
    auto& [b, r] = ports[name];
    b += bytes;
    r = rate;
  }
};

}  // namespace

LinkBound link_lower_bound(const std::vector<plan::RankPlan>& plans,
                           const std::array<int, vps::kNumStateKinds>& elem_bytes, const Cluster& cluster) {
  const int processes = static_cast<int>(plans.size());
  const plan::Topology topo = cluster.topology(processes);
  const int per_nic = std::max(1, topo.gpus_per_node / cluster.nics_per_node);
  auto gpu = [&](int p) {
    return "node " + std::to_string(topo.node_of(p)) + " GPU " + std::to_string(p % topo.gpus_per_node);
  };
  auto nic = [&](int p) {
    return "node " + std::to_string(topo.node_of(p)) + " NIC " + std::to_string(p % topo.gpus_per_node / per_nic);
  };
  PortLoads loads;
  LinkBound bound;
  for (const auto& plan : plans) {
    const int me = plan.rank;
    std::uint64_t in_intra = 0, in_inter = 0, out_intra = 0, out_inter = 0;
    double latency = 0;
    std::set<int> peers;
    for (const auto& [peer, pieces] : plan.send) peers.insert(peer);
    for (const auto& [peer, pieces] : plan.recv) peers.insert(peer);
    for (int peer : peers)
      latency += topo.node_of(peer) == topo.node_of(me) ? cluster.intra_latency : cluster.inter_latency;
    auto sum = [&](const std::vector<plan::Piece>& pieces) {
      std::uint64_t b = 0;
      for (const auto& p : pieces)
        b += static_cast<std::uint64_t>(p.box.numel()) * elem_bytes[static_cast<int>(p.kind)];
      return b;
    };
    for (const auto& [peer, pieces] : plan.recv)
      (topo.node_of(peer) == topo.node_of(me) ? in_intra : in_inter) += sum(pieces);
    for (const auto& [peer, pieces] : plan.send)
      (topo.node_of(peer) == topo.node_of(me) ? out_intra : out_inter) += sum(pieces);
    loads.add(gpu(me) + " link in", in_intra, cluster.gpu_link);
    loads.add(gpu(me) + " link out", out_intra, cluster.gpu_link);
    loads.add(gpu(me) + " PCIe in", in_inter, cluster.pcie);
    loads.add(gpu(me) + " PCIe out", out_inter, cluster.pcie);
    loads.add(nic(me) + " in", in_inter, cluster.nic);
    loads.add(nic(me) + " out", out_inter, cluster.nic);
    const double own = std::max(in_intra / cluster.gpu_link + in_inter / cluster.pcie,
                                out_intra / cluster.gpu_link + out_inter / cluster.pcie);
    if (latency + own > bound.busiest_rank_seconds) {
      bound.busiest_rank_seconds = latency + own;
      bound.busiest_rank = me;
      bound.busiest_rank_peers = static_cast<int>(peers.size());
      bound.latency_seconds = latency;
    }
  }
  for (const auto& [name, load] : loads.ports) {
    const double t = load.first / load.second;
    if (t > bound.busiest_link_seconds) {
      bound.busiest_link_seconds = t;
      bound.busiest_link = name;
      bound.busiest_link_bytes = load.first;
    }
  }
  bound.seconds = std::max(bound.busiest_link_seconds, bound.busiest_rank_seconds);
  return bound;
}

std::string format_link_bound(const LinkBound& b, const Cluster& c, int processes) {
  const plan::Topology topo = c.topology(processes);
  const int nodes = (processes + topo.gpus_per_node - 1) / topo.gpus_per_node;
  char text[800];
  int n = std::snprintf(text, sizeof text,
                        "  cluster %s (%s): %d GPUs per node, link %.0f GB/s, %d NICs of %.0f GB/s per node, "
                        "PCIe %.0f GB/s, latency %.3g/%.3g us\n",
                        c.name.c_str(), c.origin.c_str(), topo.gpus_per_node, c.gpu_link / 1e9, c.nics_per_node,
                        c.nic / 1e9, c.pcie / 1e9, c.intra_latency * 1e6, c.inter_latency * 1e6);
  if (c.nodes > 0 && nodes > c.nodes)
    n += std::snprintf(text + n, sizeof text - n,
                       "  note: the switch needs %d nodes, the cluster describes %d; "
                       "the extra nodes are taken to be alike\n",
                       nodes, c.nodes);
  std::snprintf(text + n, sizeof text - n,
                "  link-aware lower bound %.3g s: busiest link %s %.3g s (utilisation %.2f), busiest rank %d "
                "%.3g s (%d messages, %.3g ms latency)\n",
                b.seconds, b.busiest_link.empty() ? "none" : b.busiest_link.c_str(), b.busiest_link_seconds,
                b.utilisation(), b.busiest_rank, b.busiest_rank_seconds, b.busiest_rank_peers, b.latency_seconds * 1e3);
  return text;
}

}  // namespace dynatrain::sim
