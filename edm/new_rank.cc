#include "edm/new_rank.h"

namespace dynatrain::edm {

int new_rank_of(const plan::Placement& placement, int process, int ranks) { return placement.rank_of(process, ranks); }

int held_rank_index(int new_rank, int ranks, int process) { return new_rank >= 0 ? new_rank : ranks + process; }

}  // namespace dynatrain::edm
