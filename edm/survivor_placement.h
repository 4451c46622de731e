// Where the ranks of a layout sat after processes were lost, for a recovery in place (the
// survivors' world builds the next layout from what they hold). Torch-free.
#pragma once

#include <vector>

namespace dynatrain::edm {

struct SurvivorPlacement {
  // process_of_rank[r]: the survivors' world process that held rank r of the old layout; a lost
  // rank sits on a process numbered after the survivors' (a "ghost", holding nothing).
  std::vector<int> process_of_rank;
  std::vector<int> lost;  // the ghost processes, in rank order
};

// Process i of the survivors' world held rank survivors[i] of a `world_before`-rank layout.
// InputError naming the rank when one is outside 0..world_before-1 or named twice.
SurvivorPlacement survivor_placement(const std::vector<int>& survivors, int world_before);

}  // namespace dynatrain::edm
