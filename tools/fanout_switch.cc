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

// Stage 1 then stage 2 as one switch's figures.
exec::TransitionStats add(exec::TransitionStats a, const exec::TransitionStats& b) {
  a.seconds += b.seconds;
  a.bytes_sent += b.bytes_sent;
  a.bytes_received += b.bytes_received;
  a.bytes_kept += b.bytes_kept;
  a.skipped_bytes_sent += b.skipped_bytes_sent;
  a.skipped_bytes_received += b.skipped_bytes_received;
  a.kept_zero_copy_bytes += b.kept_zero_copy_bytes;
  a.kept_remapped_bytes += b.kept_remapped_bytes;
  a.messages += b.messages;
  a.zero_copy_sends += b.zero_copy_sends;
  a.zero_copy_recvs += b.zero_copy_recvs;
  a.waves += b.waves;
  a.staging_bytes = std::max(a.staging_bytes, b.staging_bytes);
  a.peak_bytes = std::max(a.peak_bytes, b.peak_bytes);
  a.predicted_peak_bytes = std::max(a.predicted_peak_bytes, b.predicted_peak_bytes);
  a.dst_bytes = b.dst_bytes;
  a.pack_seconds += b.pack_seconds;
  a.unpack_seconds += b.unpack_seconds;
  a.keep_seconds += b.keep_seconds;
  a.wait_seconds += b.wait_seconds;
  a.alloc_seconds += b.alloc_seconds;
  a.agree_seconds += b.agree_seconds;
  a.path = a.path + "; fan-out stage 2 (relays inside nodes)";
  return a;
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
  return add(s1, s2);
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
