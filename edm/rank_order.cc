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
    case Group::kActive: return {0, rank};
  }
  return {};
}

}  // namespace dynatrain::edm
