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
  std::string cluster;              // preset or JSON file (sim/cluster.h); empty: none
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
  std::printf("model %s (family %s): %zu tensors, %lld parameters\n", model.name.c_str(), model.family.c_str(),
              tensors.size(), static_cast<long long>(total));
  for (const auto& t : tensors) {
    std::string shape;
    for (auto d : t.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    std::printf("  %-40s [%s]  %s\n", t.name.c_str(), shape.c_str(), vps::describe_split(t).c_str());
  }
  return 0;
}

// `plan` lays out and plans every rank in one process: about 0.3 MiB and 1 ms a rank for a
// llama2-7b ZeRO switch (1.2 GiB, 4 s at 4096 ranks), so a bound keeps a typo from exhausting
// memory. A real switch plans one rank's own part on each rank (run-transition, train).
constexpr int kMaxPlanRanks = 16384;

// One `plan` run: lays out both configs, plans every rank, prints the statistics (with the
// placement's comparison, the cluster's bound and one rank's transfers where asked), checks
// exact cover (--check) and writes --json. Returns the exit code: 1 when the check fails.
class PlanSwitch {
 public:
  explicit PlanSwitch(const PlanArgs& args) : a_(args) {}
  int run();

 private:
  void lay_out();             // both layouts, the rank bound, the cluster or the flags' topology
  void plan_switch();         // the placement (timed), every rank's plan, the statistics
  void compare_placements();  // the planner's memory, then the fixed placement and the floor
  void print_summary() const;
  void print_placement() const;
  void print_link_bound();
  int check();  // --check: prints the result; 1 when a destination element is not covered once
  void write_json() const;

  const PlanArgs& a_;
  // The planner's own memory: peak RSS above what the process held before planning (the
  // executable's libraries, libtorch included, are resident already).
  std::uint64_t rss_before_ = 0, planner_bytes_ = 0;
  vps::ModelSpec model_;
  vps::LayoutOptions options_;
  std::optional<vps::Layout> src_, dst_;  // the planner refers to them
  int processes_ = 0;                     // the larger world
  std::optional<sim::Cluster> cluster_;   // --cluster; replaces --gpus-per-node, --intra-bw, --inter-bw
  plan::Bandwidth bw_;
  plan::Topology topo_;
  plan::SwitchPlacement placement_;
  double placement_seconds_ = 0;
  std::optional<plan::Planner> planner_;
  std::vector<plan::RankPlan> plans_;
  double plan_seconds_ = 0, rank_seconds_ = 0;
  plan::PlanStats stats_;
  std::uint64_t fixed_inter_ = 0;       // what the fixed placement sends across nodes
  bool has_floor_ = false;              // a placement other than fixed: the floor is computed
  std::uint64_t floor_inter_ = 0;       // the fewest bytes any placement sends across nodes
  std::optional<sim::LinkBound> link_;  // with --cluster
  double check_seconds_ = 0;
  std::string check_text_ = "skipped";
};

int PlanSwitch::run() {
  check_output_path("--json", a_.json_path);  // before any work: a bad path prints one line, nothing else
  rss_before_ = current_rss_bytes();
  model_ = vps::model_from_name(a_.model);
  if (a_.describe) return describe_model(model_);
  lay_out();
  plan_switch();
  print_summary();
  compare_placements();
  print_placement();
  print_link_bound();
  if (a_.transfers_rank >= 0) std::cout << plan::format_transfers(plans_[a_.transfers_rank], *src_);
  const int exit_code = a_.check ? check() : 0;
  if (!a_.json_path.empty()) write_json();
  return exit_code;
}

void PlanSwitch::lay_out() {
  options_.kinds = vps::parse_state_kinds(a_.states);
  options_.bucket_elems = a_.bucket_elems;
  src_.emplace(model_, vps::ParallelConfig::parse(a_.from), options_);
  dst_.emplace(model_, vps::ParallelConfig::parse(a_.to), options_);
  for (const auto* layout : {&*src_, &*dst_})
    if (layout->config().world_size() > kMaxPlanRanks)
      DT_INPUT_ERROR("plan: '", layout->config().str(), "' has ", layout->config().world_size(),
                     " ranks; this command plans every rank in one process and takes at most ", kMaxPlanRanks);
  processes_ = std::max(src_->config().world_size(), dst_->config().world_size());
  if (!a_.cluster.empty()) cluster_ = sim::cluster_from_spec(a_.cluster);
  bw_ = cluster_ ? cluster_->bandwidth() : plan::Bandwidth{a_.intra_gbps * 1e9, a_.inter_gbps * 1e9};
  topo_ = cluster_ ? cluster_->topology(processes_) : plan::Topology{a_.gpus_per_node};
}

void PlanSwitch::plan_switch() {
  const auto t0 = std::chrono::steady_clock::now();
  placement_ = {{},
                a_.placement == "auto" ? plan::auto_placement(*src_, *dst_, topo_, {}, bw_)
                                       : plan::Placement::parse(a_.placement)};
  placement_seconds_ = seconds_since(t0);
  planner_.emplace(*src_, *dst_, topo_, placement_);
  // The rank's range depends on the layouts, so it is checked here, not by the flag's check.
  if (a_.transfers_rank >= planner_->world_size())
    DT_INPUT_ERROR("--transfers ", a_.transfers_rank, " is not a rank; valid: 0..", planner_->world_size() - 1);
  auto timed = plan::plan_timed(*planner_);
  plans_ = std::move(timed.plans);
  plan_seconds_ = timed.plan_seconds, rank_seconds_ = timed.rank_plan_seconds;
  stats_ = plan::compute_stats(plans_, options_.elem_bytes, planner_->topology(), bw_);
}

void PlanSwitch::print_summary() const {
  const vps::ParallelConfig &from = src_->config(), &to = dst_->config();
  std::printf("plan %s: %s (%d ranks) -> %s (%d ranks), %d GPUs per node\n", model_.name.c_str(), from.str().c_str(),
              from.world_size(), to.str().c_str(), to.world_size(), topo_.gpus_per_node);
  std::cout << plan::format_stats(stats_, options_.kinds);
}

void PlanSwitch::compare_placements() {
  const std::uint64_t peak = peak_rss_bytes();
  planner_bytes_ = peak - std::min(peak, rss_before_);
  // What the fixed placement would send across nodes, to compare (only when placement differs;
  // after the memory reading, so the comparison's plans do not count as the planner's).
  fixed_inter_ = placement_.dst.is_identity() ? stats_.total.inter_node
                                              : plan::compute_stats(plan::Planner(*src_, *dst_, topo_).plan_all(),
                                                                    options_.elem_bytes, topo_, bw_)
                                                    .total.inter_node;
  // The fewest bytes any placement could send across nodes (plan/placement.h), so the reader can
  // see how far the chosen placement is from the best possible one. Only with a placement other
  // than fixed: the affinity it needs grows with ranks x processes, as auto's does.
  has_floor_ = a_.placement != "fixed";
  if (has_floor_) floor_inter_ = plan::inter_node_floor(plan::Planner(*src_, *dst_, topo_).affinity(), topo_);
}

void PlanSwitch::print_placement() const {
  std::printf("  planned in %.3g s (all ranks), %.3g ms (one rank's own part); planner peak memory %.0f MiB\n",
              plan_seconds_, rank_seconds_ * 1e3, planner_bytes_ / 1048576.0);
  const int dst_ranks = dst_->config().world_size();
  if (a_.placement != "fixed")
    std::printf("  placement %s: %d of %d ranks on another process (%.3g s to choose); inter-node %s vs %s fixed\n",
                a_.placement == "auto" ? "auto" : "given", placement_.dst.moved_ranks(dst_ranks), dst_ranks,
                placement_seconds_, format_bytes(stats_.total.inter_node).c_str(), format_bytes(fixed_inter_).c_str());
  if (has_floor_)
    std::printf("  no placement sends fewer than %s across nodes (%.2fx of fixed)\n",
                format_bytes(floor_inter_).c_str(),
                fixed_inter_ == 0 ? 0.0 : static_cast<double>(floor_inter_) / static_cast<double>(fixed_inter_));
}

void PlanSwitch::print_link_bound() {
  if (!cluster_) return;
  link_ = sim::link_lower_bound(plans_, options_.elem_bytes, *cluster_);
  std::cout << sim::format_link_bound(*link_, *cluster_, processes_);
}

int PlanSwitch::check() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto result = plan::check_plan(*src_, *dst_, plans_, placement_);
  check_seconds_ = seconds_since(t0);
  check_text_ = result.ok ? "ok" : result.violation;
  if (!result.ok) {
    std::printf("check: FAILED: %s\n", result.violation.c_str());
    return 1;
  }
  std::printf("check: ok (%.3f s)\n", check_seconds_);
  return 0;
}

void PlanSwitch::write_json() const {
  nlohmann::json j = plan::stats_json(stats_, options_.kinds);
  j["model"] = model_.name;
  j["from"] = src_->config().str();
  j["to"] = dst_->config().str();
  j["gpus_per_node"] = a_.gpus_per_node;
  j["plan_seconds"] = plan_seconds_;
  j["rank_plan_seconds"] = rank_seconds_;
  j["check_seconds"] = check_seconds_;
  j["check"] = check_text_;
  j["planner_peak_bytes"] = planner_bytes_;
  j["placement"] = a_.placement == "auto" || a_.placement == "fixed" ? a_.placement : "given";
  j["placement_processes"] = placement_.dst.processes_of(dst_->config().world_size());
  j["placement_seconds"] = placement_seconds_;
  j["fixed_inter_node_bytes"] = fixed_inter_;
  if (has_floor_) j["inter_node_floor_bytes"] = floor_inter_;
  if (cluster_) {
    j["cluster"] = sim::to_json(*cluster_);
    j["cluster_lower_bound_seconds"] = link_->seconds;
    j["busiest_link"] = link_->busiest_link;
    j["busiest_link_seconds"] = link_->busiest_link_seconds;
    j["busiest_link_utilisation"] = link_->utilisation();
    j["busiest_rank"] = link_->busiest_rank;
    j["busiest_rank_seconds"] = link_->busiest_rank_seconds;
    j["latency_seconds"] = link_->latency_seconds;
  }
  write_output_file("--json", a_.json_path, j.dump(2) + "\n");
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Plan a layout switch and print what moves where");
  cmd->add_option("--model", args->model, "Preset name or path to a Hugging Face config.json")->capture_default_str();
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
  return [args] { return PlanSwitch(*args).run(); };
}

}  // namespace dynatrain::tools
