#include "job/fanout_switch.h"

#include <algorithm>
#include <string>

namespace dynatrain::job {

namespace {

const plan::RankPlan& plan_of(const std::vector<plan::RankPlan>& plans, int process, plan::RankPlan& none) {
  if (process < static_cast<int>(plans.size())) return plans[process];
  none = plan::RankPlan{process, {}, {}, {}};
  return none;
}

}  // namespace

exec::TransitionStats run_fanout_switch(const plan::FanoutPlan& fanout, const vps::RankLayout& src_layout,
                                        std::vector<std::byte*>& src, const vps::RankLayout& dst_layout,
                                        std::vector<std::byte*>& dst, const vps::ElemBytes& elem_bytes,
                                        comm::Transport& world, exec::StateAllocator& alloc,
                                        const exec::TransitionOptions& options, double* stage1_seconds) {
  const int me = world.rank();
  plan::RankPlan none;
  const plan::RankPlan& first = plan_of(fanout.stages.at(0), me, none);
  exec::TransitionStats all =
      exec::run_transition(first, src_layout, src, dst_layout, dst, elem_bytes, world, alloc, options);
  if (stage1_seconds) *stage1_seconds = all.seconds;
  exec::TransitionOptions in_place = options;
  in_place.in_place = true;  // buffers stay where they are: keeps copy nothing
  for (std::size_t s = 1; s < fanout.stages.size(); ++s) {
    // The destination layout to itself; the stage before's destination is its source.
    std::vector<std::byte*> mid = std::move(dst);
    dst.clear();
    const plan::RankPlan& plan = plan_of(fanout.stages[s], me, none);
    const exec::TransitionStats next =
        exec::run_transition(plan, dst_layout, mid, dst_layout, dst, elem_bytes, world, alloc, in_place);
    all = exec::sequential_stats(std::move(all), next);
    const bool last = s + 1 == fanout.stages.size();
    all.path += "; fan-out stage " + std::to_string(s + 1) +
                (last && fanout.relayed_pieces > 0 ? " (relays inside nodes)" : " (tree across nodes)");
  }
  return all;
}

plan::FanoutCosts fanout_costs(const sim::Cluster& c) {
  plan::FanoutCosts costs;
  costs.intra = c.gpu_link;
  const double nic = c.nic > 0 ? c.nic : c.gpu_link;
  costs.inter = c.pcie > 0 ? std::min(c.pcie, nic) : nic;
  costs.node_inter = nic * std::max(1, c.nics_per_node);
  return costs;
}

}  // namespace dynatrain::job
