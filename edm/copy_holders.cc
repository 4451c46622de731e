#include "edm/copy_holders.h"

#include <algorithm>
#include <array>
#include <utility>

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

namespace {

// Per state kind, the (tensor, box) of every segment of `rank`'s buffers of that kind, in order.
using KindSegments = std::array<std::vector<std::pair<std::uint32_t, vps::Box>>, vps::kNumStateKinds>;

KindSegments segments_by_kind(const vps::Layout& layout, int rank) {
  KindSegments out;
  layout.visit_buffers(rank, [&](const vps::LocalBuffer& buf, const std::vector<vps::Segment>& segs) {
    auto& list = out[static_cast<std::size_t>(buf.kind)];
    for (const auto& s : segs) list.emplace_back(s.tensor, s.box);
  });
  return out;
}

}  // namespace

std::uint32_t kinds_held_on_other_nodes(const vps::Layout& layout, int rank,
                                        const std::vector<std::string>& node_of_rank) {
  const int world = layout.config().world_size();
  if (static_cast<int>(node_of_rank.size()) < world || rank < 0 || rank >= world)
    DT_INPUT_ERROR("kinds held on other nodes: rank ", rank, " with nodes named for ", node_of_rank.size(),
                   " ranks; valid: a rank in 0..", world - 1, " and a node for each of the ", world, " ranks");
  const KindSegments mine = segments_by_kind(layout, rank);
  std::uint32_t pending = 0;  // kinds `rank` holds something of, not yet found elsewhere
  for (const auto kind : layout.options().kinds)
    if (!mine[static_cast<std::size_t>(kind)].empty()) pending |= vps::kind_bit(kind);
  std::uint32_t found = 0;
  for (int q = 0; q < world && pending != 0; ++q) {
    if (node_of_rank[static_cast<std::size_t>(q)] == node_of_rank[static_cast<std::size_t>(rank)]) continue;
    const KindSegments theirs = segments_by_kind(layout, q);
    for (const auto kind : layout.options().kinds) {
      const auto k = static_cast<std::size_t>(kind);
      if ((pending & vps::kind_bit(kind)) && theirs[k] == mine[k]) {
        found |= vps::kind_bit(kind);
        pending &= ~vps::kind_bit(kind);
      }
    }
  }
  return found;
}

}  // namespace dynatrain::edm
