// Who keeps a copy of whose state (redundancy 2, docs/reliability.md): a pure function of the
// ranks' nodes, shared by the Python module's copies and its recovery. Torch-free.
//
// Nodes are numbered in the order their first rank appears; node k's ranks, in rank order, are
// R_k. Rank R_k[i] is copied by R_{k+1}[i mod |R_{k+1}|] (the next node, cyclically; with equal
// node sizes a stride of the processes per node). So a copy never sits on its rank's node, and
// a lost node's ranks are copied by the next node's, which survive unless it is lost too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vps/layout.h"

namespace dynatrain::edm {

// holder[r] for every rank r, given node_of_rank[r] (any labels: hostnames or DYNATRAIN_NODE).
// InputError when every rank sits on one node (no other node can hold a copy), naming it.
std::vector<int> copy_holders(const std::vector<std::string>& node_of_rank);

// The ranks whose copies `rank` keeps (ascending): every r with holders[r] == rank.
std::vector<int> copies_kept_by(const std::vector<int>& holders, int rank);

// The state kinds (bit k = StateKind k) of which `rank` of `layout` holds nothing that a rank
// on another node does not hold too: for each such kind some rank on a node other than
// node_of_rank[rank] has the same segments (tensor and box, in order; a dp replica). A lost
// node's ranks get those kinds from the survivors, so a copy need not keep them. InputError
// when node_of_rank does not name a node for each of the layout's ranks.
std::uint32_t kinds_held_on_other_nodes(const vps::Layout& layout, int rank,
                                        const std::vector<std::string>& node_of_rank);

}  // namespace dynatrain::edm
