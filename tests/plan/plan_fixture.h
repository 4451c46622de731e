// Shared by the plan/ tests: a plan between two layouts of one model, with its stats.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "plan/planner.h"
#include "plan/stats.h"
#include "vps/layout.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

namespace dynatrain::plan::plan_test {

inline vps::LayoutOptions small_buckets(std::int64_t elems) {
  vps::LayoutOptions o;
  o.bucket_elems = elems;
  return o;
}

struct Planned {
  vps::Layout src, dst;
  std::vector<RankPlan> plans;
  PlanStats stats;
};

inline Planned plan_between(const vps::ModelSpec& m, const std::string& from, const std::string& to,
                            vps::LayoutOptions options = {}, Topology topo = {}) {
  vps::Layout src(m, vps::ParallelConfig::parse(from), options), dst(m, vps::ParallelConfig::parse(to), options);
  Planner planner(src, dst, topo);
  auto plans = planner.plan_all();
  auto stats = compute_stats(plans, options.elem_bytes, topo);
  return {std::move(src), std::move(dst), std::move(plans), stats};
}

}  // namespace dynatrain::plan::plan_test
