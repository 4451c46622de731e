// The routing planner: a pure function (source layout, destination layout, topology) -> plan.
//
// For every destination segment it intersects the source segments of the same (tensor, kind)
// (an interval index over each box's row-major hull keeps this near-linear), and picks one
// source per piece: the destination rank itself if it holds the piece; else a holder on the
// same node; else any holder; among equals, the one with the fewest bytes already assigned in
// this (tensor, kind), ties broken by a rotation seeded with the tensor id so that replicas
// share the load across tensors. Choices depend only on the (tensor, kind) being planned, so a
// rank can plan just the tensors it touches (plan_rank) and agree with every peer.
//
// Ranks of both layouts sit on processes as `placement` says (plan/placement.h; identity by
// default); the plan, the topology and the source choice speak in processes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/placement.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::plan {

// What the destination state of each rank has in common with each process and node of the
// source side: the input of auto_placement. Bytes of overlapping source replicas count once
// per holder, so `on_process` and `on_node` can only be compared against `need`.
struct Affinity {
  int ranks = 0, processes = 0, nodes = 0;
  std::vector<std::uint64_t> need;        // [rank]: bytes of that destination rank's state
  std::vector<std::uint64_t> on_process;  // [rank * processes + p]: of those, bytes p holds
  std::vector<std::uint64_t> on_node;     // [rank * nodes + n]: of those, bytes held on node n
};

class Planner {
 public:
  // Both layouts must describe the same model and state kinds (throws InputError otherwise).
  // The job's world (its processes) is the larger of the two configs' world sizes; `placement`
  // must map each layout into it (InputError otherwise). The planner keeps its own copies of
  // the layouts (cheap: they share their shard cache), so temporaries are fine.
  Planner(const vps::Layout& src, const vps::Layout& dst, Topology topology = {}, SwitchPlacement placement = {});
  ~Planner();

  // Processes the plan spans: both layouts, and every process a placement names.
  int world_size() const;
  const SwitchPlacement& placement() const { return placement_; }
  // The layout rank `process` holds before / takes after the switch, or -1 when none.
  int src_rank_of(int process) const;
  int dst_rank_of(int process) const;
  // The RankLayout whose buffers `process` holds before / after (empty when it has no rank);
  // before, followed by the buffers of every copy it keeps (SwitchPlacement::copies), their ids
  // shifted past those before them.
  vps::RankLayout src_rank_layout(int process) const;
  vps::RankLayout dst_rank_layout(int process) const;
  const vps::Layout& src() const { return src_; }
  const vps::Layout& dst() const { return dst_; }
  const Topology& topology() const { return topology_; }

  // One process's keep / send / recv. Equal to plan_all()[process].
  RankPlan plan_rank(int process) const;
  // Every process's plan.
  std::vector<RankPlan> plan_all() const;

  // The destination boxes no live source process holds (placement().lost hold nothing), at most
  // `limit` of them, each as "tensor kind [lo, hi)"; empty when every box has a live holder.
  // Where it is not empty, plan_rank and plan_all throw InvariantError: ask first.
  std::vector<std::string> unheld(std::size_t limit = 4) const;

  // Bytes each destination rank shares with each process and node under the source placement
  // (the destination placement must be the identity: ranks are what is being placed).
  Affinity affinity() const;

 private:
  vps::Layout src_;
  vps::Layout dst_;
  Topology topology_;
  SwitchPlacement placement_;
};

}  // namespace dynatrain::plan
