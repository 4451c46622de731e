// The exact-cover checker: proves a plan right without trusting the planner's bookkeeping.
//
// It recomputes both layouts itself, places their ranks on processes as `placement` says
// (plan/placement.h; identity by default), and checks, for the processes it is given:
//   1. every piece names a real segment of the right (tensor, kind) on both sides, and its box
//      lies inside both segments' boxes (the source rank really holds what it sends);
//   2. send[p] on rank r equals recv[r] on rank p, piece by piece (when both ranks are given);
//   3. every element of every destination segment is written exactly once: the pieces landing
//      in a segment are pairwise disjoint and their sizes add up to the segment's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/placement.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::plan {

struct CheckResult {
  bool ok = true;
  std::string violation;  // the first violated element or piece, readable; empty when ok
};

// `plans` may hold every process (plan_all) or a subset; rule 2 is checked where both sides
// exist. A placement that is not injective into the job's processes is reported as a violation.
CheckResult check_plan(const vps::Layout& src, const vps::Layout& dst, const std::vector<RankPlan>& plans,
                       const SwitchPlacement& placement = {});

}  // namespace dynatrain::plan
