#include "edm/copy_holders.h"

#include <algorithm>

#include "common/error.h"

namespace dynatrain::edm {

std::vector<int> copy_holders(const std::vector<std::string>& node_of_rank) {
  std::vector<std::string> names;       // nodes in order of first appearance
  std::vector<std::vector<int>> ranks;  // ranks[k]: node k's ranks, ascending
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) {
    const auto it = std::find(names.begin(), names.end(), node_of_rank[static_cast<std::size_t>(r)]);
    const auto k = static_cast<std::size_t>(it - names.begin());
    if (it == names.end()) {
      names.push_back(node_of_rank[static_cast<std::size_t>(r)]);
      ranks.emplace_back();
    }
    ranks[k].push_back(r);
  }
  if (names.size() < 2)
    DT_INPUT_ERROR("redundancy=2 needs processes on at least two nodes; all ", node_of_rank.size(),
                   " processes run on node '", names.empty() ? "" : names[0],
                   "' (DYNATRAIN_NODE, else the hostname): no other node can keep a copy");
  std::vector<int> holders(node_of_rank.size(), -1);
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    const std::vector<int>& next = ranks[(k + 1) % ranks.size()];
    for (std::size_t i = 0; i < ranks[k].size(); ++i)
      holders[static_cast<std::size_t>(ranks[k][i])] = next[i % next.size()];
  }
  return holders;
}

std::vector<int> copies_kept_by(const std::vector<int>& holders, int rank) {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(holders.size()); ++r)
    if (holders[static_cast<std::size_t>(r)] == rank) out.push_back(r);
  return out;
}

}  // namespace dynatrain::edm
