#include "edm/vacate.h"

#include <set>

#include "common/error.h"
#include "plan/placement.h"

namespace dynatrain::edm {

std::string vacate_problem(const std::vector<int>& vacate, int world_size) {
  std::set<int> seen;
  for (int v : vacate) {
    if (v < 0 || v >= world_size)
      return "cannot vacate rank " + std::to_string(v) + ": valid ranks are 0.." + std::to_string(world_size - 1);
    if (!seen.insert(v).second) return "rank " + std::to_string(v) + " is named twice in vacate";
  }
  return {};
}

DeviceManager::Place vacate_place(int ranks, const std::vector<int>& vacate) {
  if (vacate.empty()) return {};
  return [ranks, vacate](int processes) { return plan::place_around(ranks, processes, vacate); };
}

std::vector<int> in_place_placement(int ranks, int world_size, const std::vector<int>& vacate) {
  if (const std::string why = vacate_problem(vacate, world_size); !why.empty()) DT_INPUT_ERROR(why);
  const int stay = world_size - static_cast<int>(vacate.size());
  if (ranks > stay)
    DT_INPUT_ERROR("a layout of ", ranks, " ranks needs ", ranks, " processes; ", stay, " of the world's ", world_size,
                   " stay, and this world cannot start processes");
  return plan::place_around(ranks, world_size, vacate);
}

}  // namespace dynatrain::edm
