// What node-level fan-out's rule (plan/fanout.h) says at scale, without running the switch:
// plans every process of the switch (Planner::plan_all), then plan_fanout three ways on the
// cluster's rates (job::fanout_costs, as run-transition --fanout-cluster): off, relay groups
// only, relay groups and trees across nodes, each with --fanout on (forced) and the rule's
// choice (auto). Prints one Markdown table row per way: stages, groups, bytes crossing nodes,
// the busiest process's bytes sent to other nodes, and the rule's estimated seconds.
//
//   bench_fanout_rule MODEL FROM TO CLUSTER     e.g. llama2-7b tp=8 tp=8,dp=8 a800-16x8
//
// Planner bytes and the rule's estimates only (no engine, no measurement): bench/fanout/
// rule_at_scale.sh runs the cases in docs/cluster.md.
#include <cstdio>
#include <string>

#include "common/bytes.h"
#include "common/error.h"
#include "plan/fanout.h"
#include "plan/planner.h"
#include "sim/cluster.h"
#include "job/fanout_switch.h"
#include "vps/layout.h"

namespace {

using namespace dynatrain;

void row(const char* way, const plan::FanoutPlan& fp) {
  const auto gib = [](std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ull << 30); };
  std::printf("| %s | %s | %zu | %llu | %llu | %.1f | %.1f | %.3f |\n", way, fp.applied ? "yes" : "no",
              fp.applied ? fp.stages.size() : std::size_t{1},
              static_cast<unsigned long long>(fp.applied ? fp.groups : 0),
              static_cast<unsigned long long>(fp.tree_groups), gib(fp.inter_node_bytes), gib(fp.max_sender_bytes),
              fp.applied ? fp.seconds_with : fp.seconds_without);
}

int run(int argc, char** argv) {
  if (argc != 5) DT_INPUT_ERROR("usage: bench_fanout_rule MODEL FROM TO CLUSTER (got ", argc - 1, " arguments)");
  const vps::ModelSpec model = vps::model_from_name(argv[1]);
  const vps::LayoutOptions lo;
  const vps::Layout src(model, vps::ParallelConfig::parse(argv[2]), lo),
      dst(model, vps::ParallelConfig::parse(argv[3]), lo);
  const sim::Cluster cluster = sim::cluster_from_spec(argv[4]);
  const int processes = std::max(src.config().world_size(), dst.config().world_size());
  const plan::Planner planner(src, dst, cluster.topology(processes));
  const auto plans = planner.plan_all();
  const plan::FanoutCosts costs = job::fanout_costs(cluster);
  std::printf(
      "%s %s -> %s on %s (%d processes, %d a node): relays inside nodes %.0f GB/s, a process to the "
      "network %.1f GB/s, a node's NICs %.0f GB/s, %.0f ms a later stage\n",
      model.name.c_str(), argv[2], argv[3], cluster.name.c_str(), processes, cluster.gpus_per_node, costs.intra / 1e9,
      costs.inter / 1e9, costs.node_inter / 1e9, costs.stage_seconds * 1e3);
  std::printf(
      "| fan-out | applied | stages | relay groups | tree groups | inter-node GiB | busiest sender GiB | "
      "estimated s |\n|---|---|---|---|---|---|---|---|\n");
  const auto& eb = lo.elem_bytes;
  row("off", plan::plan_fanout(planner, plans, eb, plan::FanoutMode::kOff, costs));
  row("on, relays only", plan::plan_fanout(planner, plans, eb, plan::FanoutMode::kOn, costs, 0, false));
  row("on, relays + trees", plan::plan_fanout(planner, plans, eb, plan::FanoutMode::kOn, costs));
  const plan::FanoutPlan chosen = plan::plan_fanout(planner, plans, eb, plan::FanoutMode::kAuto, costs);
  row("auto", chosen);
  std::printf("rule: %s\n", chosen.reason.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fanout_rule: %s\n", e.what());
    return 1;
  }
}
