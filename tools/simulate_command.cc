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
  double run_us = 0;  // sim::SimOptions::run_seconds, in microseconds
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

int run_simulate(const SimulateArgs& a) {
  if (!(a.cpu_cores >= 0) || a.cpu_cores > 1e6)
    DT_INPUT_ERROR("--cpu-cores ", a.cpu_cores, " is not valid; give 0 (not modelled) or the cores a node's processes share");
  if (!(a.run_us >= 0) || a.run_us > 1e6)
    DT_INPUT_ERROR("--run-us ", a.run_us, " is not valid; give 0 (runs free) or the microseconds one run of a scattered message costs");
  if (!(a.fresh_gbps >= 0) || a.fresh_gbps > 1e6)
    DT_INPUT_ERROR("--fresh-gbps ", a.fresh_gbps, " is not valid; give 0 (free: warm pool) or a positive rate in GB/s");
  if (a.placement != "fixed" && a.placement != "auto")
    DT_INPUT_ERROR("--placement '", a.placement, "' is not valid; valid: fixed, auto");
  const std::uint64_t budget = parse_bytes(a.mem_budget);
  check_output_path("--json", a.json_path);  // before any work
  const sim::Cluster cluster = sim::cluster_from_spec(a.cluster);
  const vps::ModelSpec model = vps::model_from_name(a.model);
  vps::LayoutOptions lo;
  lo.kinds = vps::parse_state_kinds(a.states);
  lo.bucket_elems = a.bucket_elems;
  const vps::Layout src(model, vps::ParallelConfig::parse(a.from), lo);
  const vps::Layout dst(model, vps::ParallelConfig::parse(a.to), lo);
  const int processes = std::max(src.config().world_size(), dst.config().world_size());
  if (processes > kMaxSimulatedProcesses)
    DT_INPUT_ERROR("simulate: the switch needs ", processes, " processes; this command traces each as a thread and takes at most ",
                   kMaxSimulatedProcesses);
  const plan::Topology topo = cluster.topology(processes);

  auto t0 = std::chrono::steady_clock::now();
  const plan::SwitchPlacement placement{
      {}, a.placement == "auto" ? plan::auto_placement(src, dst, topo, {}, cluster.bandwidth()) : plan::Placement{}};
  const plan::Planner planner(src, dst, topo, placement);
  auto plans = planner.plan_all();
  const double plan_s = seconds_since(t0);
  const std::uint32_t zeroed = a.at_step_boundary ? exec::kStepBoundaryKinds : 0;
  // Fan-out (plan/fanout.h) from the whole plan: every relay group and tree (what `on` runs).
  const plan::FanoutMode fanout_mode = plan::parse_fanout_mode(a.fanout);
  const plan::FanoutPlan fanout =
      fanout_mode == plan::FanoutMode::kOff
          ? plan::FanoutPlan{}
          : plan::plan_fanout(planner, plans, lo.elem_bytes, plan::FanoutMode::kOn, job::fanout_costs(cluster), zeroed);
  // The bound covers what the engine moves: at a step boundary the gradients stay behind.
  if (a.at_step_boundary) drop_kinds(plans, zeroed);
  const sim::LinkBound bound = sim::link_lower_bound(plans, lo.elem_bytes, cluster);

  exec::TransitionOptions opt;
  opt.mem_budget = budget;
  opt.topology = topo;
  // Open MPI moves strided runs straight between buffers only when the whole communicator is on
  // one node (comm/mpi); on a cluster of several nodes every strided chunk is packed.
  opt.direct_runs = processes <= topo.gpus_per_node;
  opt.zeroed_kinds = zeroed;
  opt.overlap_links = exec::parse_link_overlap(a.overlap_links);
  opt.rounds_in_flight = a.rounds_in_flight;
  const sim::SimOptions sim_opt{.fresh_rate = a.fresh_gbps * 1e9, .cpu_cores = a.cpu_cores, .run_seconds = a.run_us * 1e-6};
  t0 = std::chrono::steady_clock::now();
  const auto traces = sim::trace_switch(planner, lo.elem_bytes, opt);
  double trace_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const sim::SimResult one_stage = sim::simulate(traces, cluster, sim_opt);
  double sim_s = seconds_since(t0);
  // Fan-out's stages traced and spliced (sim::trace_fanout) and simulated; `auto` keeps
  // whichever the simulator finds faster.
  sim::SimResult r = one_stage;
  std::optional<sim::SimResult> staged;
  bool fanout_taken = false;
  if (fanout.applied) {
    t0 = std::chrono::steady_clock::now();
    const auto staged_traces = sim::trace_fanout(planner, fanout, lo.elem_bytes, opt);
    trace_s += seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    staged = sim::simulate(staged_traces, cluster, sim_opt);
    sim_s += seconds_since(t0);
    fanout_taken = fanout_mode == plan::FanoutMode::kOn || staged->seconds < one_stage.seconds;
    if (fanout_taken) r = *staged;
  }

  std::printf("simulate %s: %s (%d ranks) -> %s (%d ranks), placement %s, budget %s\n", model.name.c_str(),
              src.config().str().c_str(), src.config().world_size(), dst.config().str().c_str(),
              dst.config().world_size(), a.placement.c_str(), format_bytes(static_cast<double>(budget)).c_str());
  std::cout << sim::format_link_bound(bound, cluster, processes);
  if (fanout_mode != plan::FanoutMode::kOff) {
    if (staged)
      std::printf("  fan-out %s: %zu stages, %llu relay groups, %llu trees; inter-node bytes %s -> %s; "
                  "predicted %.4g s with, %.4g s without: %s\n",
                  a.fanout.c_str(), fanout.stages.size(), static_cast<unsigned long long>(fanout.groups),
                  static_cast<unsigned long long>(fanout.tree_groups),
                  format_bytes(static_cast<double>(fanout.inter_node_bytes_without)).c_str(),
                  format_bytes(static_cast<double>(fanout.inter_node_bytes)).c_str(), staged->seconds, one_stage.seconds,
                  fanout_taken ? "taken" : "not taken (slower)");
    else
      std::printf("  fan-out %s: nothing to relay (%s)\n", a.fanout.c_str(), fanout.reason.c_str());
  }
  std::cout << sim::format_sim(r);
  std::printf("  predicted / lower bound%s %.2f; took %.3g s to plan, %.3g s to trace the engine, %.3g s to simulate\n",
              fanout_taken ? " (of the plan without fan-out)" : "", bound.seconds > 0 ? r.seconds / bound.seconds : 0.0,
              plan_s, trace_s, sim_s);
  if (!a.json_path.empty()) {
    nlohmann::json j;
    j["model"] = model.name;
    j["from"] = src.config().str();
    j["to"] = dst.config().str();
    j["processes"] = processes;
    j["placement"] = a.placement;
    j["budget_bytes"] = budget;
    j["at_step_boundary"] = a.at_step_boundary;
    j["cpu_cores"] = a.cpu_cores;
    j["run_us"] = a.run_us;
    j["cluster"] = sim::to_json(cluster);
    j["overlap_links"] = a.overlap_links;
    j["rounds_in_flight"] = a.rounds_in_flight;
    j["predicted_seconds"] = r.seconds;
    j["fanout"] = a.fanout;
    j["fanout_applied"] = fanout_taken;
    j["fanout_stages"] = fanout_taken ? fanout.stages.size() : 1;
    j["predicted_without_fanout_seconds"] = one_stage.seconds;
    if (staged) {
      j["predicted_with_fanout_seconds"] = staged->seconds;
      j["inter_node_bytes"] = fanout_taken ? fanout.inter_node_bytes : fanout.inter_node_bytes_without;
      j["inter_node_bytes_without_fanout"] = fanout.inter_node_bytes_without;
      j["fanout_relay_groups"] = fanout.groups;
      j["fanout_tree_groups"] = fanout.tree_groups;
    }
    j["lower_bound_seconds"] = bound.seconds;
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
    j["plan_seconds"] = plan_s;
    j["trace_seconds"] = trace_s;
    j["simulate_seconds"] = sim_s;
    write_output_file("--json", a.json_path, j.dump(2) + "\n");
  }
  return 0;
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
  cmd->add_option("--placement", args->placement, "fixed or auto (plan --placement)")->capture_default_str();
  cmd->add_option("--mem-budget", args->mem_budget, "The engine's staging budget per rank, e.g. 256MiB")
      ->capture_default_str();
  cmd->add_option("--bucket-elems", args->bucket_elems, "ZeRO bucket size in elements")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--states", args->states, "State kinds: all, optimizer, or a list")->capture_default_str();
  cmd->add_flag("--at-step-boundary", args->at_step_boundary, "Gradients are not moved (run-transition's flag)");
  cmd->add_option("--fresh-gbps", args->fresh_gbps,
                  "First-touch rate of fresh destination memory, GB/s (0: free, the warm pool)")
      ->capture_default_str();
  cmd->add_option("--cpu-cores", args->cpu_cores,
                  "Cores each node's processes share, for CPU-only runs (0: GPUs, not modelled); the "
                  "cluster's rates are then read as measured with all processes busy (sim/simulator.h)")
      ->capture_default_str();
  cmd->add_option("--run-us", args->run_us,
                  "Microseconds per run beyond the first of a message moved straight between scattered runs "
                  "(0: free, as on GPUs; run-transition --json measures it as predicted_run_seconds)")
      ->capture_default_str();
  add_link_schedule_options(cmd, args->overlap_links, args->rounds_in_flight);
  cmd->add_option("--fanout", args->fanout,
                  "Node-level fan-out (run-transition --fanout): off; on plays every relay group and tree as "
                  "stages; auto plays both and keeps the faster")
      ->check(CLI::IsMember({"off", "auto", "on"}))
      ->capture_default_str();
  cmd->add_option("--json", args->json_path, "Write the prediction as JSON to this file");
  return [args] { return run_simulate(*args); };
}

}  // namespace dynatrain::tools
