// Who keeps a copy of whose state (redundancy 2, docs/reliability.md): a pure function of the
// ranks' nodes, shared by the Python module's copies and its recovery. Torch-free.
//
// Nodes are numbered in the order their first rank appears; node k's ranks, in rank order, are
// R_k. Rank R_k[i] is copied by R_{k+1}[i mod |R_{k+1}|] (the next node, cyclically; with equal
// node sizes a stride of the processes per node). So a copy never sits on its rank's node, and
// a lost node's ranks are copied by the next node's, which survive unless it is lost too.
#pragma once

#include <string>
#include <vector>

namespace dynatrain::edm {

// holder[r] for every rank r, given node_of_rank[r] (any labels: hostnames or DYNATRAIN_NODE).
// InputError when every rank sits on one node (no other node can hold a copy), naming it.
std::vector<int> copy_holders(const std::vector<std::string>& node_of_rank);

// The ranks whose copies `rank` keeps (ascending): every r with holders[r] == rank.
std::vector<int> copies_kept_by(const std::vector<int>& holders, int rank);

}  // namespace dynatrain::edm
