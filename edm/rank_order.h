// The one home of the rank order: which ranks of a layout form each communication group.
//
// Ranks follow Megatron-core's tp-cp-dp-pp order (vps::rank_coords, docs/config.md); expert
// layers decompose the tp*cp*dp ranks of each pipeline stage as etp x ep x edp. A group of kind
// g is the set of ranks that agree on every coordinate except g's own:
//   tp:  same (cp, dp, pp)        cp:  same (tp, dp, pp)        dp: same (tp, cp, pp)
//   pp:  same (tp, cp, dp)        ep:  same (etp, edp, pp)      edp: same (etp, ep, pp)
//   etp: expert TP, etp consecutive ranks of one tp group (the trainer needs etp | tp):
//        same (cp, dp, pp, tp / etp)
//   dpcp: the dp x cp ranks that shard and reduce dense state under cp: same (tp, pp)
//   active: every rank of the layout (world rank order)
// etp and dpcp exist only where they differ from a group above (etp > 1, cp > 1):
// group_needed() says which groups a layout has.
// group_colour() is the only function in the project that encodes this; the trainer and the
// communicator cache (communicators.h) both derive every group from it.
#pragma once

#include <array>

#include "vps/parallel_config.h"

namespace dynatrain::edm {

enum class Group : int { kTp, kCp, kDp, kPp, kEp, kEdp, kEtp, kDpCp, kActive };
inline constexpr int kNumGroups = 9;
inline constexpr std::array<Group, kNumGroups> kAllGroups = {
    Group::kTp, Group::kCp, Group::kDp, Group::kPp, Group::kEp, Group::kEdp, Group::kEtp, Group::kDpCp, Group::kActive};
const char* group_name(Group g);
// False for etp when etp = 1 (or etp does not divide tp) and for dpcp when cp = 1 (the group would be a single rank or equal
// dp): such a group is never created.
bool group_needed(const vps::ParallelConfig& config, Group g);
// How many groups (communicator splits) a layout has: 7 plus one each for etp > 1 and cp > 1.
int groups_needed(const vps::ParallelConfig& config);

// colour: equal for exactly the ranks of one group, >= 0; -1 for ranks outside the layout
// (rank >= config.world_size()). key: the rank's position inside its group (its coordinate
// along g; the world rank for kActive), so a split(colour, key) yields group ranks in order.
struct Colour {
  int colour = -1;
  int key = 0;
};
Colour group_colour(const vps::ParallelConfig& config, int rank, Group g);

}  // namespace dynatrain::edm
