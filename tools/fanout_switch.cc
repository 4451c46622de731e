#include "tools/fanout_switch.h"

#include <algorithm>
#include <string>

namespace dynatrain::tools {

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
  const plan::RankPlan& first = plan_of(fanout.stage1, me, none);
  exec::TransitionStats s1 =
      exec::run_transition(first, src_layout, src, dst_layout, dst, elem_bytes, world, alloc, options);
  if (stage1_seconds) *stage1_seconds = s1.seconds;
  if (!fanout.applied) return s1;
  // Stage 2: the destination layout to itself; stage 1's destination is its source.
  std::vector<std::byte*> mid = std::move(dst);
  dst.clear();
  plan::RankPlan none2;
  const plan::RankPlan& second = plan_of(fanout.stage2, me, none2);
  exec::TransitionOptions in_place = options;
  in_place.in_place = true;  // buffers stay where they are: keeps copy nothing
  const exec::TransitionStats s2 =
      exec::run_transition(second, dst_layout, mid, dst_layout, dst, elem_bytes, world, alloc, in_place);
  exec::TransitionStats both = exec::sequential_stats(std::move(s1), s2);
  both.path += "; fan-out stage 2 (relays inside nodes)";
  return both;
}

plan::FanoutCosts fanout_costs(const sim::Cluster& c) {
  plan::FanoutCosts costs;
  costs.intra = c.gpu_link;
  const double nic = c.nic > 0 ? c.nic : c.gpu_link;
  costs.inter = c.pcie > 0 ? std::min(c.pcie, nic) : nic;
  costs.node_inter = nic * std::max(1, c.nics_per_node);
  return costs;
}

}  // namespace dynatrain::tools
