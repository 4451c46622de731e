// `dynatrain plan`: plan a switch, print its summary, optionally check it and write JSON.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "common/error.h"
#include "plan/checker.h"
#include "plan/planner.h"
#include "plan/stats.h"
#include "sim/cluster.h"
#include "sim/link_bound.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "common/output_file.h"
#include "common/clock.h"

namespace dynatrain::tools {

namespace {

struct PlanArgs {
  std::string model = "llama2-70b";
  std::string from = "tp=8,pp=4,dp=4";
  std::string to = "tp=4,pp=8,dp=4";
  int gpus_per_node = 8;
  std::string states = "all";
  bool check = false;
  std::string json_path;
  std::int64_t bucket_elems = 40'000'000;
  double intra_gbps = 150, inter_gbps = 25;
  int transfers_rank = -1;
  std::string placement = "fixed";  // fixed, auto, or one process per destination rank
  std::string cluster;               // preset or JSON file (sim/cluster.h); empty: none
  bool describe = false;
};


std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::uint64_t current_rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// `--describe`: the model's logical tensors with global shapes and how tp/ep split each.
int describe_model(const vps::ModelSpec& model) {
  const auto tensors = vps::build_tensors(model);
  std::int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  std::printf("model %s (family %s): %zu tensors, %lld parameters\n", model.name.c_str(),
              model.family.c_str(), tensors.size(), static_cast<long long>(total));
  for (const auto& t : tensors) {
    std::string shape;
    for (auto d : t.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    std::printf("  %-40s [%s]  %s\n", t.name.c_str(), shape.c_str(), vps::describe_split(t).c_str());
  }
  return 0;
}

int run_plan(const PlanArgs& a) {
  check_output_path("--json", a.json_path);  // before any work: a bad path prints one line, nothing else
  // The planner's own memory: peak RSS above what the process held before planning (the
  // executable's libraries, libtorch included, are resident already).
  const std::uint64_t rss_before = current_rss_bytes();
  const vps::ModelSpec model = vps::model_from_name(a.model);
  if (a.describe) return describe_model(model);
  vps::LayoutOptions options;
  options.kinds = vps::parse_state_kinds(a.states);
  options.bucket_elems = a.bucket_elems;
  const vps::Layout src(model, vps::ParallelConfig::parse(a.from), options);
  const vps::Layout dst(model, vps::ParallelConfig::parse(a.to), options);
  // `plan` lays out and plans every rank in one process: about 0.3 MiB and 1 ms a rank for a
  // llama2-7b ZeRO switch (1.2 GiB, 4 s at 4096 ranks), so a bound keeps a typo from exhausting
  // memory. A real switch plans one rank's own part on each rank (run-transition, train).
  constexpr int kMaxPlanRanks = 16384;
  for (const auto* layout : {&src, &dst})
    if (layout->config().world_size() > kMaxPlanRanks)
      DT_INPUT_ERROR("plan: '", layout->config().str(), "' has ", layout->config().world_size(),
                     " ranks; this command plans every rank in one process and takes at most ",
                     kMaxPlanRanks);
  // A described cluster replaces --gpus-per-node, --intra-bw and --inter-bw.
  const int processes = std::max(src.config().world_size(), dst.config().world_size());
  const std::optional<sim::Cluster> cluster =
      a.cluster.empty() ? std::nullopt : std::optional(sim::cluster_from_spec(a.cluster));
  const plan::Bandwidth bw = cluster ? cluster->bandwidth() : plan::Bandwidth{a.intra_gbps * 1e9, a.inter_gbps * 1e9};
  const plan::Topology topo = cluster ? cluster->topology(processes) : plan::Topology{a.gpus_per_node};
  auto t0 = std::chrono::steady_clock::now();
  const plan::SwitchPlacement placement{
      {}, a.placement == "auto" ? plan::auto_placement(src, dst, topo, {}, bw) : plan::Placement::parse(a.placement)};
  const double placement_seconds = seconds_since(t0);
  const plan::Planner planner(src, dst, topo, placement);
  if (a.transfers_rank >= planner.world_size())
    DT_INPUT_ERROR("--transfers ", a.transfers_rank, " is not a rank; valid: 0..", planner.world_size() - 1);

  const auto [plans, plan_seconds, rank_seconds] = plan::plan_timed(planner);
  const auto stats = plan::compute_stats(plans, options.elem_bytes, planner.topology(), bw);

  std::printf("plan %s: %s (%d ranks) -> %s (%d ranks), %d GPUs per node\n", model.name.c_str(),
              src.config().str().c_str(), src.config().world_size(), dst.config().str().c_str(),
              dst.config().world_size(), topo.gpus_per_node);
  std::cout << plan::format_stats(stats, options.kinds);
  const std::uint64_t peak = peak_rss_bytes();
  const std::uint64_t planner_bytes = peak - std::min(peak, rss_before);
  // What the fixed placement would send across nodes, to compare (only when placement differs;
  // after the memory reading, so the comparison's plans do not count as the planner's).
  const std::uint64_t fixed_inter = placement.dst.is_identity() ? stats.total.inter_node
      : plan::compute_stats(plan::Planner(src, dst, topo).plan_all(), options.elem_bytes, topo, bw).total.inter_node;
  // The fewest bytes any placement could send across nodes (plan/placement.h), so the reader can
  // see how far the chosen placement is from the best possible one. Only with a placement other
  // than fixed: the affinity it needs grows with ranks x processes, as auto's does.
  const bool has_floor = a.placement != "fixed";
  const std::uint64_t floor_inter =
      has_floor ? plan::inter_node_floor(plan::Planner(src, dst, topo).affinity(), topo) : 0;
  std::printf("  planned in %.3g s (all ranks), %.3g ms (one rank's own part); planner peak memory %.0f MiB\n",
              plan_seconds, rank_seconds * 1e3, planner_bytes / 1048576.0);
  if (a.placement != "fixed")
    std::printf("  placement %s: %d of %d ranks on another process (%.3g s to choose); inter-node %s vs %s fixed\n",
                a.placement == "auto" ? "auto" : "given", placement.dst.moved_ranks(dst.config().world_size()),
                dst.config().world_size(), placement_seconds, format_bytes(stats.total.inter_node).c_str(),
                format_bytes(fixed_inter).c_str());
  if (has_floor)
    std::printf("  no placement sends fewer than %s across nodes (%.2fx of fixed)\n", format_bytes(floor_inter).c_str(),
                fixed_inter == 0 ? 0.0 : static_cast<double>(floor_inter) / static_cast<double>(fixed_inter));
  std::optional<sim::LinkBound> link;
  if (cluster) {
    link = sim::link_lower_bound(plans, options.elem_bytes, *cluster);
    std::cout << sim::format_link_bound(*link, *cluster, processes);
  }
  if (a.transfers_rank >= 0) std::cout << plan::format_transfers(plans[a.transfers_rank], src);

  int exit_code = 0;
  double check_seconds = 0;
  std::string check_text = "skipped";
  if (a.check) {
    t0 = std::chrono::steady_clock::now();
    const auto result = plan::check_plan(src, dst, plans, placement);
    check_seconds = seconds_since(t0);
    check_text = result.ok ? "ok" : result.violation;
    if (result.ok) {
      std::printf("check: ok (%.3f s)\n", check_seconds);
    } else {
      std::printf("check: FAILED: %s\n", result.violation.c_str());
      exit_code = 1;
    }
  }
  if (!a.json_path.empty()) {
    nlohmann::json j = plan::stats_json(stats, options.kinds);
    j["model"] = model.name;
    j["from"] = src.config().str();
    j["to"] = dst.config().str();
    j["gpus_per_node"] = a.gpus_per_node;
    j["plan_seconds"] = plan_seconds;
    j["rank_plan_seconds"] = rank_seconds;
    j["check_seconds"] = check_seconds;
    j["check"] = check_text;
    j["planner_peak_bytes"] = planner_bytes;
    j["placement"] = a.placement == "auto" || a.placement == "fixed" ? a.placement : "given";
    j["placement_processes"] = placement.dst.processes_of(dst.config().world_size());
    j["placement_seconds"] = placement_seconds;
    j["fixed_inter_node_bytes"] = fixed_inter;
    if (has_floor) j["inter_node_floor_bytes"] = floor_inter;
    if (cluster) {
      j["cluster"] = sim::to_json(*cluster);
      j["cluster_lower_bound_seconds"] = link->seconds;
      j["busiest_link"] = link->busiest_link;
      j["busiest_link_seconds"] = link->busiest_link_seconds;
      j["busiest_link_utilisation"] = link->utilisation();
      j["busiest_rank"] = link->busiest_rank;
      j["busiest_rank_seconds"] = link->busiest_rank_seconds;
      j["latency_seconds"] = link->latency_seconds;
    }
    write_output_file("--json", a.json_path, j.dump(2) + "\n");
  }
  return exit_code;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Plan a layout switch and print what moves where");
  cmd->add_option("--model", args->model, "Preset name or path to a Hugging Face config.json")
      ->capture_default_str();
  cmd->add_option("--from", args->from, "Source config, e.g. tp=8,pp=4,dp=4")->capture_default_str();
  cmd->add_option("--to", args->to, "Destination config")->capture_default_str();
  cmd->add_option("--gpus-per-node", args->gpus_per_node, "Ranks per node")
      ->check(whole_number_in(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--states", args->states,
                  "State kinds: all, optimizer, or a list of param,grad,master,exp_avg,exp_avg_sq")
      ->capture_default_str();
  cmd->add_flag("--check", args->check, "Prove exact cover; exit 1 naming the first bad element");
  cmd->add_option("--json", args->json_path, "Write the statistics as JSON to this file");
  cmd->add_option("--bucket-elems", args->bucket_elems, "ZeRO bucket size in elements")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--intra-bw", args->intra_gbps, "Intra-node bandwidth, GB/s per rank")
      ->check(positive_number_up_to(1e6))
      ->capture_default_str();
  cmd->add_option("--inter-bw", args->inter_gbps, "Inter-node bandwidth, GB/s per rank")
      ->check(positive_number_up_to(1e6))
      ->capture_default_str();
  cmd->add_option("--transfers", args->transfers_rank, "Print every piece of this rank's plan")
      ->check(whole_number_in(-1, 1 << 30, " (-1: none)"));
  cmd->add_option("--cluster", args->cluster,
                  "Cluster the switch runs on: a800-16x8, a800-16x8-4nic, h100-nx8, this-machine or a "
                  "JSON file (docs/cluster.md); sets GPUs per node and bandwidths, adds the link-aware bound");
  cmd->add_option("--placement", args->placement,
                  "Which process takes each destination rank: fixed (rank r on process r), auto "
                  "(fewest bytes moved, fewest across nodes), or a list, one process per rank")
      ->capture_default_str();
  cmd->add_flag("--describe", args->describe,
                "Print the model's tensors, their shapes and how each is split, then exit");
  return [args] { return run_plan(*args); };
}

}  // namespace dynatrain::tools
