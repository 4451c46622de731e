// `dynatrain simulate`: predict a switch's time on a described cluster by playing every
// process's engine schedule (sim/trace.h) through the link model (sim/simulator.h).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/bytes.h"
#include "common/error.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "sim/cluster.h"
#include "sim/link_bound.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "tools/commands.h"
#include "job/fanout_switch.h"
#include "tools/flag_checks.h"
#include "common/output_file.h"
#include "common/clock.h"

namespace dynatrain::tools {

namespace {

struct SimulateArgs {
  std::string cluster;
  std::string model = "llama2-70b";
  std::string from = "tp=8,pp=4,dp=4";
  std::string to = "tp=4,pp=8,dp=4";
  std::string placement = "fixed";
  std::string mem_budget = "256MiB";
  std::int64_t bucket_elems = 40'000'000;
  std::string states = "all";
  bool at_step_boundary = false;
  double fresh_gbps = 0;
  double cpu_cores = 0;
  double run_us = 0;                   // sim::SimOptions::run_seconds, in microseconds
  std::string overlap_links = "auto";  // exec::LinkOverlap: auto is on for a cluster of several nodes
  int rounds_in_flight = 0;            // exec::TransitionOptions::rounds_in_flight (0: auto)
  std::string fanout = "off";          // plan::FanoutMode: off, auto (the faster of the two), on
  std::string json_path;
};

// Removes the pieces of the kinds in `kinds` (bit k = vps::StateKind k) from every plan.
void drop_kinds(std::vector<plan::RankPlan>& plans, std::uint32_t kinds) {
  auto drop = [&](std::vector<plan::Piece>& v) {
    std::erase_if(v, [&](const plan::Piece& p) { return (kinds >> static_cast<int>(p.kind)) & 1u; });
  };
  for (auto& p : plans) {
    drop(p.keep);
    for (auto* m : {&p.send, &p.recv}) {
      for (auto& [peer, v] : *m) drop(v);
      std::erase_if(*m, [](const auto& kv) { return kv.second.empty(); });  // no message to that peer
    }
  }
}

// The engine traces every process as a thread of this process; beyond this the threads and
// their schedules outgrow one machine (sim/README.md).
constexpr int kMaxSimulatedProcesses = 4096;

// One `simulate` run: lays out both configs, plans the switch (and fan-out's stages, where
// asked), traces the engine's schedule and plays it through the cluster, then prints the
// summary and writes --json. Flag values are checked by their CLI11 checks before this runs.
class Simulate {
 public:
  explicit Simulate(const SimulateArgs& args) : a_(args) {}
  int run();

 private:
  void lay_out();          // budget, output path, cluster, model, both layouts, topology
  void plan_switch();      // placement, every process's plan, fan-out, the link bound
  void simulate_switch();  // the engine's traces played through the cluster, staged too
  void print_summary() const;
  void print_fanout() const;
  void write_json() const;
  sim::SimOptions sim_options() const;
  exec::TransitionOptions engine_options() const;

  const SimulateArgs& a_;
  std::uint64_t budget_ = 0;
  sim::Cluster cluster_;
  vps::ModelSpec model_;
  vps::LayoutOptions lo_;
  std::optional<vps::Layout> src_, dst_;  // the planner refers to them
  int processes_ = 0;                     // the switch's processes: the larger world
  plan::Topology topo_;
  std::optional<plan::Planner> planner_;
  std::vector<plan::RankPlan> plans_;  // without the kinds left behind at a step boundary
  std::uint32_t zeroed_ = 0;           // kinds zeroed, not moved (exec::kStepBoundaryKinds)
  plan::FanoutMode fanout_mode_ = plan::FanoutMode::kOff;
  plan::FanoutPlan fanout_;
  sim::LinkBound bound_;
  sim::SimResult one_stage_;              // the plan without fan-out
  std::optional<sim::SimResult> staged_;  // fan-out's stages, when it applies
  bool fanout_taken_ = false;             // the prediction is `staged_`'s
  double plan_s_ = 0, trace_s_ = 0, sim_s_ = 0;

  const sim::SimResult& result() const { return fanout_taken_ ? *staged_ : one_stage_; }
};

int Simulate::run() {
  lay_out();
  plan_switch();
  simulate_switch();
  print_summary();
  if (!a_.json_path.empty()) write_json();
  return 0;
}

void Simulate::lay_out() {
  budget_ = parse_bytes(a_.mem_budget);
  check_output_path("--json", a_.json_path);  // before any work
  cluster_ = sim::cluster_from_spec(a_.cluster);
  model_ = vps::model_from_name(a_.model);
  lo_.kinds = vps::parse_state_kinds(a_.states);
  lo_.bucket_elems = a_.bucket_elems;
  src_.emplace(model_, vps::ParallelConfig::parse(a_.from), lo_);
  dst_.emplace(model_, vps::ParallelConfig::parse(a_.to), lo_);
  processes_ = std::max(src_->config().world_size(), dst_->config().world_size());
  if (processes_ > kMaxSimulatedProcesses)
    DT_INPUT_ERROR("simulate: the switch needs ", processes_,
                   " processes; this command traces each as a thread and takes at most ", kMaxSimulatedProcesses);
  topo_ = cluster_.topology(processes_);
}

void Simulate::plan_switch() {
  const auto t0 = std::chrono::steady_clock::now();
  const plan::SwitchPlacement placement{
      {},
      a_.placement == "auto" ? plan::auto_placement(*src_, *dst_, topo_, {}, cluster_.bandwidth()) : plan::Placement{}};
  planner_.emplace(*src_, *dst_, topo_, placement);
  plans_ = planner_->plan_all();
  plan_s_ = seconds_since(t0);
  zeroed_ = a_.at_step_boundary ? exec::kStepBoundaryKinds : 0;
  // Fan-out (plan/fanout.h) from the whole plan: every relay group and tree (what `on` runs).
  fanout_mode_ = plan::parse_fanout_mode(a_.fanout);
  if (fanout_mode_ != plan::FanoutMode::kOff)
    fanout_ = plan::plan_fanout(*planner_, plans_, lo_.elem_bytes, plan::FanoutMode::kOn, job::fanout_costs(cluster_),
                                zeroed_);
  // The bound covers what the engine moves: at a step boundary the gradients stay behind.
  if (a_.at_step_boundary) drop_kinds(plans_, zeroed_);
  bound_ = sim::link_lower_bound(plans_, lo_.elem_bytes, cluster_);
}

exec::TransitionOptions Simulate::engine_options() const {
  exec::TransitionOptions opt;
  opt.mem_budget = budget_;
  opt.topology = topo_;
  // Open MPI moves strided runs straight between buffers only when the whole communicator is on
  // one node (comm/mpi); on a cluster of several nodes every strided chunk is packed.
  opt.direct_runs = processes_ <= topo_.gpus_per_node;
  opt.zeroed_kinds = zeroed_;
  opt.overlap_links = exec::parse_link_overlap(a_.overlap_links);
  opt.rounds_in_flight = a_.rounds_in_flight;
  return opt;
}

sim::SimOptions Simulate::sim_options() const {
  return {.fresh_rate = a_.fresh_gbps * 1e9, .cpu_cores = a_.cpu_cores, .run_seconds = a_.run_us * 1e-6};
}

// Fan-out's stages traced and spliced (sim::trace_fanout) and simulated; `auto` keeps
// whichever the simulator finds faster.
void Simulate::simulate_switch() {
  const exec::TransitionOptions opt = engine_options();
  const sim::SimOptions sim_opt = sim_options();
  auto t0 = std::chrono::steady_clock::now();
  const auto traces = sim::trace_switch(*planner_, lo_.elem_bytes, opt);
  trace_s_ = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  one_stage_ = sim::simulate(traces, cluster_, sim_opt);
  sim_s_ = seconds_since(t0);
  if (!fanout_.applied) return;
  t0 = std::chrono::steady_clock::now();
  const auto staged_traces = sim::trace_fanout(*planner_, fanout_, lo_.elem_bytes, opt);
  trace_s_ += seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  staged_ = sim::simulate(staged_traces, cluster_, sim_opt);
  sim_s_ += seconds_since(t0);
  fanout_taken_ = fanout_mode_ == plan::FanoutMode::kOn || staged_->seconds < one_stage_.seconds;
}

void Simulate::print_summary() const {
  const vps::ParallelConfig &from = src_->config(), &to = dst_->config();
  std::printf("simulate %s: %s (%d ranks) -> %s (%d ranks), placement %s, budget %s\n", model_.name.c_str(),
              from.str().c_str(), from.world_size(), to.str().c_str(), to.world_size(), a_.placement.c_str(),
              format_bytes(static_cast<double>(budget_)).c_str());
  std::cout << sim::format_link_bound(bound_, cluster_, processes_);
  if (fanout_mode_ != plan::FanoutMode::kOff) print_fanout();
  const sim::SimResult& r = result();
  std::cout << sim::format_sim(r);
  std::printf("  predicted / lower bound%s %.2f; took %.3g s to plan, %.3g s to trace the engine, %.3g s to simulate\n",
              fanout_taken_ ? " (of the plan without fan-out)" : "",
              bound_.seconds > 0 ? r.seconds / bound_.seconds : 0.0, plan_s_, trace_s_, sim_s_);
}

void Simulate::print_fanout() const {
  if (!staged_) {
    std::printf("  fan-out %s: nothing to relay (%s)\n", a_.fanout.c_str(), fanout_.reason.c_str());
    return;
  }
  std::printf(
      "  fan-out %s: %zu stages, %llu relay groups, %llu trees; inter-node bytes %s -> %s; "
      "predicted %.4g s with, %.4g s without: %s\n",
      a_.fanout.c_str(), fanout_.stages.size(), static_cast<unsigned long long>(fanout_.groups),
      static_cast<unsigned long long>(fanout_.tree_groups),
      format_bytes(static_cast<double>(fanout_.inter_node_bytes_without)).c_str(),
      format_bytes(static_cast<double>(fanout_.inter_node_bytes)).c_str(), staged_->seconds, one_stage_.seconds,
      fanout_taken_ ? "taken" : "not taken (slower)");
}

void Simulate::write_json() const {
  const sim::SimResult& r = result();
  nlohmann::json j;
  j["model"] = model_.name;
  j["from"] = src_->config().str();
  j["to"] = dst_->config().str();
  j["processes"] = processes_;
  j["placement"] = a_.placement;
  j["budget_bytes"] = budget_;
  j["at_step_boundary"] = a_.at_step_boundary;
  j["cpu_cores"] = a_.cpu_cores;
  j["run_us"] = a_.run_us;
  j["cluster"] = sim::to_json(cluster_);
  j["overlap_links"] = a_.overlap_links;
  j["rounds_in_flight"] = a_.rounds_in_flight;
  j["predicted_seconds"] = r.seconds;
  j["fanout"] = a_.fanout;
  j["fanout_applied"] = fanout_taken_;
  j["fanout_stages"] = fanout_taken_ ? fanout_.stages.size() : 1;
  j["predicted_without_fanout_seconds"] = one_stage_.seconds;
  if (staged_) {
    j["predicted_with_fanout_seconds"] = staged_->seconds;
    j["inter_node_bytes"] = fanout_taken_ ? fanout_.inter_node_bytes : fanout_.inter_node_bytes_without;
    j["inter_node_bytes_without_fanout"] = fanout_.inter_node_bytes_without;
    j["fanout_relay_groups"] = fanout_.groups;
    j["fanout_tree_groups"] = fanout_.tree_groups;
  }
  j["lower_bound_seconds"] = bound_.seconds;
  j["busiest_link"] = r.busiest_link;
  j["busiest_link_seconds"] = r.busiest_link_seconds;
  j["busiest_link_bytes"] = r.busiest_link_bytes;
  j["busiest_link_utilisation"] = r.utilisation();
  j["critical_process"] = r.last_process;
  j["critical_copy_seconds"] = r.last_copy_seconds;
  j["critical_wait_seconds"] = r.last_wait_seconds;
  j["critical_link"] = r.critical_link;
  j["messages"] = r.messages;
  j["bytes_moved"] = r.bytes;
  j["trace_events"] = r.events;
  j["plan_seconds"] = plan_s_;
  j["trace_seconds"] = trace_s_;
  j["simulate_seconds"] = sim_s_;
  write_output_file("--json", a_.json_path, j.dump(2) + "\n");
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand("simulate", "Predict a switch's time on a described cluster (docs/cluster.md)");
  cmd->add_option("--cluster", args->cluster,
                  "a800-16x8, a800-16x8-4nic, h100-nx8, this-machine or a JSON file (docs/cluster.md)")
      ->required();
  cmd->add_option("--model", args->model, "Preset name or path to a Hugging Face config.json")->capture_default_str();
  cmd->add_option("--from", args->from, "Source config")->capture_default_str();
  cmd->add_option("--to", args->to, "Destination config")->capture_default_str();
  cmd->add_option("--placement", args->placement, "fixed or auto (plan --placement)")
      ->check(CLI::IsMember({"fixed", "auto"}))
      ->capture_default_str();
  cmd->add_option("--mem-budget", args->mem_budget, "The engine's staging budget per rank, e.g. 256MiB")
      ->capture_default_str();
  cmd->add_option("--bucket-elems", args->bucket_elems, "ZeRO bucket size in elements")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--states", args->states, "State kinds: all, optimizer, or a list")->capture_default_str();
  cmd->add_flag("--at-step-boundary", args->at_step_boundary, "Gradients are not moved (run-transition's flag)");
  cmd->add_option("--fresh-gbps", args->fresh_gbps,
                  "First-touch rate of fresh destination memory, GB/s (0: free, the warm pool)")
      ->check(zero_or_positive_up_to(1e6, "give 0 (free: warm pool) or a positive rate in GB/s"))
      ->capture_default_str();
  cmd->add_option("--cpu-cores", args->cpu_cores,
                  "Cores each node's processes share, for CPU-only runs (0: GPUs, not modelled); the "
                  "cluster's rates are then read as measured with all processes busy (sim/simulator.h)")
      ->check(zero_or_positive_up_to(1e6, "give 0 (not modelled) or the cores a node's processes share"))
      ->capture_default_str();
  cmd->add_option("--run-us", args->run_us,
                  "Microseconds per run beyond the first of a message moved straight between scattered runs "
                  "(0: free, as on GPUs; run-transition --json measures it as predicted_run_seconds)")
      ->check(
          zero_or_positive_up_to(1e6, "give 0 (runs free) or the microseconds one run of a scattered message costs"))
      ->capture_default_str();
  add_link_schedule_options(cmd, args->overlap_links, args->rounds_in_flight);
  cmd->add_option("--fanout", args->fanout,
                  "Node-level fan-out (run-transition --fanout): off; on plays every relay group and tree as "
                  "stages; auto plays both and keeps the faster")
      ->check(CLI::IsMember({"off", "auto", "on"}))
      ->capture_default_str();
  cmd->add_option("--json", args->json_path, "Write the prediction as JSON to this file");
  return [args] { return Simulate(*args).run(); };
}

}  // namespace dynatrain::tools
