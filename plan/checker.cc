#include "plan/checker.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/error.h"

namespace dynatrain::plan {

namespace {

using vps::Box;

std::string describe(const vps::Layout& layout, const Piece& p) {
  std::ostringstream os;
  os << layout.tensors()[p.tensor].name << " " << vps::state_kind_name(p.kind) << " " << p.box.str()
     << " rank " << p.src_rank << " -> rank " << p.dst_rank;
  return os.str();
}

std::string element(const vps::Layout& layout, std::uint32_t tensor, vps::StateKind kind,
                    const vps::Coord& c, int ndim) {
  std::ostringstream os;
  os << layout.tensors()[tensor].name << " " << vps::state_kind_name(kind) << " element (";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << c[d];
  os << ")";
  return os.str();
}

// The segment a piece names, or nullptr when the names are out of range or disagree.
const vps::Segment* named_segment(const vps::RankLayout& layout, std::uint32_t buffer,
                                  std::uint32_t segment, const Piece& p) {
  if (buffer >= layout.buffers.size()) return nullptr;
  const auto& buf = layout.buffers[buffer];
  if (buf.kind != p.kind || segment >= buf.segments.size()) return nullptr;
  const auto& seg = buf.segments[segment];
  return seg.tensor == p.tensor ? &seg : nullptr;
}

// Element-level recount of one destination segment, used only to name the first bad element.
std::string first_bad_element(const vps::Layout& dst, const vps::LocalBuffer& buf,
                              const vps::Segment& seg, const std::vector<const Piece*>& pieces,
                              int rank) {
  std::vector<int> count(seg.box.numel(), 0);
  for (const Piece* p : pieces)
    for (std::int64_t i = 0; i < p->box.numel(); ++i) ++count[seg.box.linear_index(p->box.coord_at(i))];
  for (std::size_t i = 0; i < count.size(); ++i)
    if (count[i] != 1)
      return element(dst, seg.tensor, buf.kind, seg.box.coord_at(i), seg.box.ndim) + " on rank " +
             std::to_string(rank) + " is written " + std::to_string(count[i]) + " times";
  return "segment " + seg.box.str() + " on rank " + std::to_string(rank) + " is miscovered";
}

}  // namespace

CheckResult check_plan(const vps::Layout& src, const vps::Layout& dst,
                       const std::vector<RankPlan>& plans, const SwitchPlacement& placement) {
  const int src_ranks = src.config().world_size(), dst_ranks = dst.config().world_size();
  const int world = std::max(src_ranks, dst_ranks);  // processes
  auto fail = [](std::string what) { return CheckResult{false, std::move(what)}; };
  try {
    placement.src.validate(src_ranks, world);
    placement.dst.validate(dst_ranks, world);
  } catch (const InputError& e) {
    return fail(e.what());
  }
  // The buffers a process holds in a layout: those of the rank placed on it, or none.
  auto layout_of = [](const vps::Layout& layout, const Placement& place, int process) {
    const int r = place.rank_of(process, layout.config().world_size());
    return r < 0 ? vps::RankLayout{} : layout.rank_layout(r);
  };
  std::map<int, const RankPlan*> by_rank;
  for (const auto& p : plans) by_rank[p.rank] = &p;
  std::map<int, vps::RankLayout> src_layouts;  // computed on demand, by process
  auto src_layout = [&](int r) -> const vps::RankLayout& {
    auto it = src_layouts.find(r);
    if (it == src_layouts.end()) it = src_layouts.emplace(r, layout_of(src, placement.src, r)).first;
    return it->second;
  };

  for (const auto& plan : plans) {
    const int r = plan.rank;
    if (r < 0 || r >= world) return fail("plan for rank " + std::to_string(r) + " outside the world");
    const vps::RankLayout dst_layout = layout_of(dst, placement.dst, r);
    // Pieces landing in each destination segment: (buffer, segment) -> pieces.
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<const Piece*>> landing;
    auto accept = [&](const Piece& p, int expect_src) -> std::string {
      if (p.dst_rank != r || p.src_rank != expect_src)
        return "piece " + describe(dst, p) + " is filed under the wrong rank";
      const vps::Segment* d = named_segment(dst_layout, p.dst_buffer, p.dst_segment, p);
      if (!d || !d->box.contains(p.box))
        return "piece " + describe(dst, p) + " does not fit the destination segment it names";
      if (p.src_rank < 0 || p.src_rank >= world)
        return "piece " + describe(dst, p) + " names a source rank outside the world";
      const vps::Segment* s = named_segment(src_layout(p.src_rank), p.src_buffer, p.src_segment, p);
      if (!s || !s->box.contains(p.box))
        return "piece " + describe(dst, p) + ": the source rank does not hold it";
      landing[{p.dst_buffer, p.dst_segment}].push_back(&p);
      return "";
    };
    for (const auto& p : plan.keep)
      if (auto e = accept(p, r); !e.empty()) return fail(e);
    for (const auto& [peer, pieces] : plan.recv) {
      for (const auto& p : pieces)
        if (auto e = accept(p, peer); !e.empty()) return fail(e);
      if (auto it = by_rank.find(peer); it != by_rank.end()) {
        auto sit = it->second->send.find(r);
        if (sit == it->second->send.end() || sit->second != pieces)
          return fail("rank " + std::to_string(peer) + " sends rank " + std::to_string(r) +
                      " other pieces than rank " + std::to_string(r) + " expects");
      }
    }
    for (const auto& [peer, pieces] : plan.send) {
      for (const auto& p : pieces)
        if (p.src_rank != r || p.dst_rank != peer)
          return fail("piece " + describe(dst, p) + " is filed under the wrong rank");
      if (by_rank.count(peer) && !by_rank.at(peer)->recv.count(r))
        return fail("rank " + std::to_string(r) + " sends to rank " + std::to_string(peer) +
                    ", which expects nothing from it");
    }
    // Exact cover of every destination segment.
    for (const auto& buf : dst_layout.buffers) {
      for (std::uint32_t s = 0; s < buf.segments.size(); ++s) {
        const auto& seg = buf.segments[s];
        auto it = landing.find({buf.id, s});
        static const std::vector<const Piece*> kNone;
        const auto& pieces = it == landing.end() ? kNone : it->second;
        std::int64_t total = 0;
        for (const Piece* p : pieces) total += p->box.numel();
        bool disjoint = true;
        // Sweep by row-major hull start; only hull-overlapping pairs need a box test.
        std::vector<std::pair<std::int64_t, const Piece*>> order;
        for (const Piece* p : pieces) order.emplace_back(seg.box.linear_index(p->box.lo), p);
        std::sort(order.begin(), order.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<std::pair<std::int64_t, const Piece*>> active;  // (hull end, piece)
        for (const auto& [start, p] : order) {
          std::erase_if(active, [&](const auto& a) { return a.first <= start; });
          for (const auto& a : active)
            if (!intersect(a.second->box, p->box).empty()) disjoint = false;
          vps::Coord last = p->box.hi;
          for (int d = 0; d < p->box.ndim; ++d) --last[d];
          active.emplace_back(seg.box.linear_index(last) + 1, p);
          if (!disjoint) break;
        }
        if (!disjoint || total != seg.box.numel())
          return fail(first_bad_element(dst, buf, seg, pieces, r));
      }
    }
  }
  return {};
}

}  // namespace dynatrain::plan
