#include "edm/rank_order.h"

namespace dynatrain::edm {

const char* group_name(Group g) {
  switch (g) {
    case Group::kTp: return "tp";
    case Group::kCp: return "cp";
    case Group::kDp: return "dp";
    case Group::kPp: return "pp";
    case Group::kEp: return "ep";
    case Group::kEdp: return "edp";
    case Group::kEtp: return "etp";
    case Group::kDpCp: return "dpcp";
    case Group::kActive: return "active";
  }
  return "?";
}

Colour group_colour(const vps::ParallelConfig& c, int rank, Group g) {
  const vps::RankCoords k = vps::rank_coords(c, rank);
  if (!k.active) return {};
  switch (g) {
    case Group::kTp: return {k.cp + c.cp * (k.dp + c.dp * k.pp), k.tp};
    case Group::kCp: return {k.tp + c.tp * (k.dp + c.dp * k.pp), k.cp};
    case Group::kDp: return {k.tp + c.tp * (k.cp + c.cp * k.pp), k.dp};
    case Group::kPp: return {k.tp + c.tp * (k.cp + c.cp * k.dp), k.pp};
    case Group::kEp: return {k.etp + c.etp * (k.edp + c.edp() * k.pp), k.ep};
    case Group::kEdp: return {k.etp + c.etp * (k.ep + c.ep * k.pp), k.edp};
    case Group::kEtp: return {k.tp / c.etp + (c.tp / c.etp) * (k.cp + c.cp * (k.dp + c.dp * k.pp)), k.tp % c.etp};
    case Group::kDpCp: return {k.tp + c.tp * k.pp, k.dense_shard};
    case Group::kActive: return {0, rank};
  }
  return {};
}

bool group_needed(const vps::ParallelConfig& c, Group g) {
  if (g == Group::kEtp) return c.etp > 1 && c.tp % c.etp == 0;  // the trainer's rule (etp | tp)
  if (g == Group::kDpCp) return c.cp > 1;
  return true;
}

int groups_needed(const vps::ParallelConfig& c) {
  int n = 0;
  for (Group g : kAllGroups) n += group_needed(c, g) ? 1 : 0;
  return n;
}

}  // namespace dynatrain::edm
