// The one home of the rank order: which ranks of a layout form each communication group.
//
// Ranks follow Megatron-core's tp-cp-dp-pp order (vps::rank_coords, docs/config.md); expert
// layers decompose the tp*cp*dp ranks of each pipeline stage as etp x ep x edp. A group of kind
// g is the set of ranks that agree on every coordinate except g's own:
//   tp:  same (cp, dp, pp)        cp:  same (tp, dp, pp)        dp: same (tp, cp, pp)
//   pp:  same (tp, cp, dp)        ep:  same (etp, edp, pp)      edp: same (etp, ep, pp)
//   active: every rank of the layout (world rank order)
// group_colour() is the only function in the project that encodes this; the trainer and the
// communicator cache (communicators.h) both derive every group from it.
#pragma once

#include <array>

#include "vps/parallel_config.h"

namespace dynatrain::edm {

enum class Group : int { kTp, kCp, kDp, kPp, kEp, kEdp, kActive };
inline constexpr int kNumGroups = 7;
inline constexpr std::array<Group, kNumGroups> kAllGroups = {
    Group::kTp, Group::kCp, Group::kDp, Group::kPp, Group::kEp, Group::kEdp, Group::kActive};
const char* group_name(Group g);

// colour: equal for exactly the ranks of one group, >= 0; -1 for ranks outside the layout
// (rank >= config.world_size()). key: the rank's position inside its group (its coordinate
// along g; the world rank for kActive), so a split(colour, key) yields group ranks in order.
struct Colour {
  int colour = -1;
  int key = 0;
};
Colour group_colour(const vps::ParallelConfig& config, int rank, Group g);

}  // namespace dynatrain::edm
