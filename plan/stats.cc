#include "plan/stats.h"

#include <algorithm>
#include <chrono>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "plan/planner.h"
#include "common/clock.h"

namespace dynatrain::plan {

namespace {

nlohmann::json totals_json(const TrafficTotals& t) {
  return {{"kept_bytes", t.kept},
          {"intra_node_bytes", t.intra_node},
          {"inter_node_bytes", t.inter_node},
          {"pieces", t.pieces}};
}

}  // namespace

TimedPlans plan_timed(const Planner& planner) {
  TimedPlans out;
  auto t0 = std::chrono::steady_clock::now();
  out.plans = planner.plan_all();
  out.plan_seconds = seconds_since(t0);
  for (int r : {0, planner.world_size() / 2, planner.world_size() - 1}) {
    t0 = std::chrono::steady_clock::now();
    (void)planner.plan_rank(r);
    out.rank_plan_seconds = std::max(out.rank_plan_seconds, seconds_since(t0));
  }
  return out;
}

nlohmann::json stats_json(const PlanStats& stats, const std::vector<vps::StateKind>& kinds) {
  nlohmann::json j;
  j["total"] = totals_json(stats.total);
  for (auto k : kinds) j["per_kind"][vps::state_kind_name(k)] = totals_json(stats.per_kind[static_cast<int>(k)]);
  j["messages"] = stats.messages;
  j["max_in_bytes"] = stats.max_in;
  j["max_out_bytes"] = stats.max_out;
  j["lower_bound_seconds"] = stats.lower_bound_seconds;
  return j;
}

PlanStats compute_stats(const std::vector<RankPlan>& plans, const vps::ElemBytes& elem_bytes, const Topology& topology,
                        const Bandwidth& bw) {
  PlanStats s;
  const std::size_t world = plans.size();
  s.in_intra.assign(world, 0);
  s.in_inter.assign(world, 0);
  s.out_intra.assign(world, 0);
  s.out_inter.assign(world, 0);
  auto bytes_of = [&](const Piece& p) {
    return static_cast<std::uint64_t>(p.box.numel()) * elem_bytes[static_cast<int>(p.kind)];
  };
  for (const auto& plan : plans) {
    for (const auto& p : plan.keep) {
      s.total.kept += bytes_of(p);
      s.per_kind[static_cast<int>(p.kind)].kept += bytes_of(p);
      ++s.total.pieces;
      ++s.per_kind[static_cast<int>(p.kind)].pieces;
    }
    for (const auto& [peer, pieces] : plan.recv) {
      ++s.messages;
      const bool intra = topology.node_of(peer) == topology.node_of(plan.rank);
      for (const auto& p : pieces) {
        const auto b = bytes_of(p);
        auto& kind = s.per_kind[static_cast<int>(p.kind)];
        (intra ? s.total.intra_node : s.total.inter_node) += b;
        (intra ? kind.intra_node : kind.inter_node) += b;
        ++s.total.pieces;
        ++kind.pieces;
        (intra ? s.in_intra : s.in_inter)[plan.rank] += b;
        (intra ? s.out_intra : s.out_inter)[peer] += b;
      }
    }
  }
  for (std::size_t r = 0; r < world; ++r) {
    const auto in = s.in_intra[r] + s.in_inter[r], out = s.out_intra[r] + s.out_inter[r];
    if (in > s.max_in) s.max_in = in, s.max_in_rank = static_cast<int>(r);
    if (out > s.max_out) s.max_out = out, s.max_out_rank = static_cast<int>(r);
    const double t_in = s.in_intra[r] / bw.intra_node + s.in_inter[r] / bw.inter_node;
    const double t_out = s.out_intra[r] / bw.intra_node + s.out_inter[r] / bw.inter_node;
    s.lower_bound_seconds = std::max({s.lower_bound_seconds, t_in, t_out});
  }
  return s;
}

std::string format_stats(const PlanStats& s, const std::vector<vps::StateKind>& kinds) {
  std::ostringstream os;
  auto row = [&](const std::string& name, const TrafficTotals& t) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-11s kept %12s   intra-node %12s   inter-node %12s   pieces %llu\n",
                  name.c_str(), format_bytes(t.kept).c_str(), format_bytes(t.intra_node).c_str(),
                  format_bytes(t.inter_node).c_str(), static_cast<unsigned long long>(t.pieces));
    os << line;
  };
  for (auto k : kinds) row(vps::state_kind_name(k), s.per_kind[static_cast<int>(k)]);
  row("total", s.total);
  os << "  messages " << s.messages << "; max in " << format_bytes(s.max_in) << " (rank " << s.max_in_rank
     << "), max out " << format_bytes(s.max_out) << " (rank " << s.max_out_rank << ")\n";
  char lb[64];
  std::snprintf(lb, sizeof lb, "%.3g s", s.lower_bound_seconds);
  os << "  lower bound " << lb << "\n";
  return os.str();
}

std::string format_transfers(const RankPlan& plan, const vps::Layout& src) {
  std::ostringstream os;
  auto line = [&](const char* what, int peer, const Piece& p) {
    os << what;
    if (peer >= 0) os << ' ' << peer;
    os << ": " << src.tensors()[p.tensor].name << ' ' << vps::state_kind_name(p.kind) << ' ' << p.box.str()
       << " (src buf " << p.src_buffer << " seg " << p.src_segment << " -> dst buf " << p.dst_buffer << " seg "
       << p.dst_segment << ")\n";
  };
  os << "rank " << plan.rank << ":\n";
  for (const auto& p : plan.keep) line("  keep", -1, p);
  for (const auto& [peer, pieces] : plan.send)
    for (const auto& p : pieces) line("  send ->", peer, p);
  for (const auto& [peer, pieces] : plan.recv)
    for (const auto& p : pieces) line("  recv <-", peer, p);
  return os.str();
}

}  // namespace dynatrain::plan
