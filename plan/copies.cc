#include "plan/copies.h"

#include <map>

namespace dynatrain::plan {

std::vector<std::uint32_t> copy_bases(const vps::Layout& src, const SwitchPlacement& placement) {
  std::map<int, std::uint32_t> next;  // process -> its next free buffer id
  std::vector<std::uint32_t> bases;
  for (const auto& c : placement.copies) {
    auto [it, fresh] = next.try_emplace(c.process, 0);
    if (fresh) {
      const int r = placement.src.rank_of(c.process, src.config().world_size());
      if (r >= 0) it->second = static_cast<std::uint32_t>(src.rank_layout(r).buffers.size());
    }
    bases.push_back(it->second);
    it->second += static_cast<std::uint32_t>(src.rank_layout(c.rank).buffers.size());
  }
  return bases;
}

void append_copies(const vps::Layout& src, const SwitchPlacement& placement, int process, vps::RankLayout& layout) {
  for (const auto& c : placement.copies) {
    if (c.process != process) continue;
    for (vps::LocalBuffer b : src.rank_layout(c.rank).buffers) {
      b.id = static_cast<std::uint32_t>(layout.buffers.size());
      layout.buffers.push_back(std::move(b));
    }
  }
}

}  // namespace dynatrain::plan
