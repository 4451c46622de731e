#include "job/survivor_layout.h"

#include <tuple>
#include <vector>

namespace dynatrain::job {

namespace {

std::vector<int> divisors_descending(int n) {
  std::vector<int> out;
  for (int d = n; d >= 1; --d)
    if (n % d == 0) out.push_back(d);
  return out;
}

}  // namespace

std::optional<vps::ParallelConfig> survivor_layout(const vps::ParallelConfig& previous, int processes,
                                                   const std::function<bool(const vps::ParallelConfig&)>& runs) {
  auto key = [&](const vps::ParallelConfig& c) {
    return std::make_tuple(c.tp == previous.tp, c.pp == previous.pp, c.ep == previous.ep, c.dp);
  };
  for (int world = processes; world >= 1; --world) {
    std::optional<vps::ParallelConfig> best;
    for (int tp : divisors_descending(world))
      for (int pp : divisors_descending(world / tp))
        for (int ep : divisors_descending(previous.ep)) {
          vps::ParallelConfig c;
          c.tp = tp;
          c.pp = pp;
          c.dp = world / (tp * pp);
          c.ep = ep;
          c.zero = previous.zero;
          if (runs(c) && (!best || key(c) > key(*best))) best = c;
        }
    if (best) return best;
  }
  return std::nullopt;
}

}  // namespace dynatrain::job
