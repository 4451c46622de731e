// A process's rank in the layout a switch commits, from the prepare's placement
// (plan::Placement of Prepared::process_of_rank), the same for the CLI trainer and an adopted PyTorch model.
// Torch-free.
#pragma once

#include "plan/placement.h"

namespace dynatrain::edm {

// The rank of a `ranks`-rank layout that transition-world process `process` takes, or -1 when
// it takes none (vacated, left out by the placement, or beyond the layout under the identity
// placement).
int new_rank_of(const plan::Placement& placement, int process, int ranks);

// The rank index a process holds its (empty) state at: its new rank, or one past the layout's
// ranks for a process that takes none (ranks + process: distinct for every such process).
int held_rank_index(int new_rank, int ranks, int process);

}  // namespace dynatrain::edm
