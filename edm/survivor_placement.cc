#include "edm/survivor_placement.h"

#include "common/error.h"

namespace dynatrain::edm {

SurvivorPlacement survivor_placement(const std::vector<int>& survivors, int world_before) {
  const int n = static_cast<int>(survivors.size());
  SurvivorPlacement s;
  s.process_of_rank.assign(static_cast<std::size_t>(std::max(world_before, 0)), -1);
  for (int i = 0; i < n; ++i) {
    const int r = survivors[static_cast<std::size_t>(i)];
    if (r < 0 || r >= world_before || s.process_of_rank[static_cast<std::size_t>(r)] >= 0)
      DT_INPUT_ERROR("survivor rank ", r, ": valid are distinct ranks 0..", world_before - 1);
    s.process_of_rank[static_cast<std::size_t>(r)] = i;
  }
  for (int r = 0, ghost = n; r < world_before; ++r)
    if (s.process_of_rank[static_cast<std::size_t>(r)] < 0) {
      s.lost.push_back(ghost);
      s.process_of_rank[static_cast<std::size_t>(r)] = ghost++;
    }
  return s;
}

}  // namespace dynatrain::edm
