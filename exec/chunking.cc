#include "exec/chunking.h"

#include <algorithm>
#include <utility>

namespace dynatrain::exec {

std::size_t chunk_capacity(std::size_t mem_budget, int slots) {
  return mem_budget / (4 * static_cast<std::size_t>(slots)) / 8 * 8;
}

std::vector<Chunk> cut_chunks(const std::vector<plan::Piece>& pieces, const std::vector<std::uint32_t>& order,
                              const vps::ElemBytes& eb, std::size_t cap) {
  std::vector<Chunk> out;
  Chunk cur;
  for (std::uint32_t i : order) {
    const plan::Piece& p = pieces[i];
    const std::size_t e = static_cast<std::size_t>(eb[static_cast<int>(p.kind)]);
    const std::int64_t n = p.box.numel();
    std::int64_t pos = 0;
    while (pos < n) {
      const std::int64_t room = static_cast<std::int64_t>((cap - cur.bytes) / e);
      if (room == 0) {
        out.push_back(std::move(cur));
        cur = {};
        continue;
      }
      const std::int64_t take = std::min(room, n - pos);
      cur.ranges.push_back({i, pos, pos + take});
      cur.bytes += static_cast<std::size_t>(take) * e;
      pos += take;
    }
  }
  if (!cur.ranges.empty()) out.push_back(std::move(cur));
  return out;
}

WaveWork cut_wave_chunks(const plan::RankPlan& plan, int waves, const vps::ElemBytes& eb, std::size_t cap,
                         const std::function<int(const plan::Piece&, bool source)>& wave_of) {
  WaveWork work(static_cast<std::size_t>(waves));
  std::vector<std::vector<std::uint32_t>> by_wave(static_cast<std::size_t>(waves));
  auto cut = [&](const std::map<int, std::vector<plan::Piece>>& lists, bool source) {
    for (const auto& [peer, pieces] : lists) {
      for (auto& v : by_wave) v.clear();
      for (std::uint32_t i = 0; i < pieces.size(); ++i) by_wave[wave_of(pieces[i], source)].push_back(i);
      for (int w = 0; w < waves; ++w) {
        if (by_wave[w].empty()) continue;
        PeerWork& pw = work[w][peer];
        (source ? pw.send : pw.recv) = cut_chunks(pieces, by_wave[w], eb, cap);
      }
    }
  };
  cut(plan.send, true);
  cut(plan.recv, false);
  return work;
}

}  // namespace dynatrain::exec
