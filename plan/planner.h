// The routing planner: a pure function (source layout, destination layout, topology) -> plan.
//
// For every destination segment it intersects the source segments of the same (tensor, kind)
// (an interval index over each box's row-major hull keeps this near-linear), and picks one
// source per piece: the destination rank itself if it holds the piece; else a holder on the
// same node; else any holder; among equals, the one with the fewest bytes already assigned in
// this (tensor, kind), ties broken by a rotation seeded with the tensor id so that replicas
// share the load across tensors. Choices depend only on the (tensor, kind) being planned, so a
// rank can plan just the tensors it touches (plan_rank) and agree with every peer.
#pragma once

#include <memory>
#include <vector>

#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::plan {

class Planner {
 public:
  // Both layouts must describe the same model and state kinds (throws InputError otherwise).
  // The job's world is the larger of the two configs' world sizes. The planner keeps its own
  // copies of the layouts (cheap: they share their shard cache), so temporaries are fine.
  Planner(const vps::Layout& src, const vps::Layout& dst, Topology topology = {});
  ~Planner();

  int world_size() const;
  const vps::Layout& src() const { return src_; }
  const vps::Layout& dst() const { return dst_; }
  const Topology& topology() const { return topology_; }

  // One rank's keep / send / recv. Equal to plan_all()[rank].
  RankPlan plan_rank(int rank) const;
  // Every rank's plan.
  std::vector<RankPlan> plan_all() const;

 private:
  vps::Layout src_;
  vps::Layout dst_;
  Topology topology_;
};

}  // namespace dynatrain::plan
