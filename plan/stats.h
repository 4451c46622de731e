// Plan statistics: what a switch moves, where, and the lower bound on its time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/plan.h"

#include "vps/layout.h"

namespace dynatrain::plan {

class Planner;  // plan/planner.h includes this header (through placement.h)

struct Bandwidth {
  double intra_node = 150e9;  // bytes/s one way per rank (NVLink-class)
  double inter_node = 25e9;   // bytes/s one way per rank (200 Gb/s NIC)
};

struct TrafficTotals {
  std::uint64_t kept = 0, intra_node = 0, inter_node = 0;  // bytes
  std::uint64_t pieces = 0;
};

struct PlanStats {
  TrafficTotals total;
  std::array<TrafficTotals, vps::kNumStateKinds> per_kind{};
  std::uint64_t messages = 0;  // (sender, receiver) pairs with at least one piece
  // Per rank: bytes in / out split by intra and inter node.
  std::vector<std::uint64_t> in_intra, in_inter, out_intra, out_inter;
  std::uint64_t max_in = 0, max_out = 0;
  int max_in_rank = 0, max_out_rank = 0;
  // max over ranks of max(in, out) time, each the intra part over intra bandwidth plus the
  // inter part over inter bandwidth: no schedule can finish sooner.
  double lower_bound_seconds = 0;
};

// From every rank's plan (plan_all). Counts each piece once, on its receiving side.
PlanStats compute_stats(const std::vector<RankPlan>& plans, const vps::ElemBytes& elem_bytes, const Topology& topology,
                        const Bandwidth& bandwidth = {});

// Every rank's plan with the timings `dynatrain plan` reports: the whole plan, and one rank's
// own part (what each process computes during a real switch), the slowest of ranks 0, W/2, W-1.
struct TimedPlans {
  std::vector<RankPlan> plans;
  double plan_seconds = 0, rank_plan_seconds = 0;
};
TimedPlans plan_timed(const Planner& planner);  // Planner: plan/planner.h

// The statistics as `dynatrain plan --json` writes them (and the Python binding's plan()
// returns them): total and per_kind (one entry for each of `kinds`) as {kept_bytes,
// intra_node_bytes, inter_node_bytes, pieces}, messages, max_in_bytes, max_out_bytes,
// lower_bound_seconds.
nlohmann::json stats_json(const PlanStats& stats, const std::vector<vps::StateKind>& kinds);
// Readable multi-line summary: totals, per state kind, per-rank extremes, lower bound.
std::string format_stats(const PlanStats& stats, const std::vector<vps::StateKind>& kinds);

// Every piece of one rank's plan, one per line ("send -> 3: layers.0.attn.qkv.weight param [..]").
std::string format_transfers(const RankPlan& plan, const vps::Layout& src);

}  // namespace dynatrain::plan
