#include "plan/checker.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "common/error.h"
#include "plan/copies.h"

namespace dynatrain::plan {

namespace {

using vps::Box;

std::string describe(const vps::Layout& layout, const Piece& p) {
  std::ostringstream os;
  if (p.tensor < layout.tensors().size())
    os << layout.tensors()[p.tensor].name;
  else  // a plan from outside the planner may name any tensor
    os << "tensor " << p.tensor << " (the layout has " << layout.tensors().size() << ")";
  os << " " << vps::state_kind_name(p.kind) << " " << p.box.str() << " rank " << p.src_rank << " -> rank "
     << p.dst_rank;
  return os.str();
}

std::string element(const vps::Layout& layout, std::uint32_t tensor, vps::StateKind kind, const vps::Coord& c,
                    int ndim) {
  std::ostringstream os;
  os << layout.tensors()[tensor].name << " " << vps::state_kind_name(kind) << " element (";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << c[d];
  os << ")";
  return os.str();
}

// The segment a piece names, or nullptr when the names are out of range or disagree.
const vps::Segment* named_segment(const vps::RankLayout& layout, std::uint32_t buffer, std::uint32_t segment,
                                  const Piece& p) {
  if (buffer >= layout.buffers.size()) return nullptr;
  const auto& buf = layout.buffers[buffer];
  if (buf.kind != p.kind || segment >= buf.segments.size()) return nullptr;
  const auto& seg = buf.segments[segment];
  return seg.tensor == p.tensor ? &seg : nullptr;
}

// Element-level recount of one destination segment, used only to name the first bad element.
std::string first_bad_element(const vps::Layout& dst, const vps::LocalBuffer& buf, const vps::Segment& seg,
                              const std::vector<const Piece*>& pieces, int rank) {
  std::vector<int> count(seg.box.numel(), 0);
  for (const Piece* p : pieces)
    for (std::int64_t i = 0; i < p->box.numel(); ++i) ++count[seg.box.linear_index(p->box.coord_at(i))];
  for (std::size_t i = 0; i < count.size(); ++i)
    if (count[i] != 1)
      return element(dst, seg.tensor, buf.kind, seg.box.coord_at(i), seg.box.ndim) + " on rank " +
             std::to_string(rank) + " is written " + std::to_string(count[i]) + " times";
  return "segment " + seg.box.str() + " on rank " + std::to_string(rank) + " is miscovered";
}

using Landing = std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<const Piece*>>;

// True when no two pieces share an element. Sweeps by row-major hull start within `seg`; only
// pairs whose hulls overlap need a box test.
bool pairwise_disjoint(const vps::Segment& seg, const std::vector<const Piece*>& pieces) {
  std::vector<std::pair<std::int64_t, const Piece*>> order;
  for (const Piece* p : pieces) order.emplace_back(seg.box.linear_index(p->box.lo), p);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<std::int64_t, const Piece*>> active;  // (hull end, piece)
  for (const auto& [start, p] : order) {
    std::erase_if(active, [&](const auto& a) { return a.first <= start; });
    for (const auto& a : active)
      if (!intersect(a.second->box, p->box).empty()) return false;
    vps::Coord last = p->box.hi;
    for (int d = 0; d < p->box.ndim; ++d) --last[d];
    active.emplace_back(seg.box.linear_index(last) + 1, p);
  }
  return true;
}

// Rule 3 on one process: every destination segment is written exactly once by the pieces that
// landed in it. Returns the first miscovered element, or "".
std::string check_exact_cover(const vps::Layout& dst, const vps::RankLayout& dst_layout, const Landing& landing,
                              int rank) {
  static const std::vector<const Piece*> kNone;
  for (const auto& buf : dst_layout.buffers) {
    for (std::uint32_t s = 0; s < buf.segments.size(); ++s) {
      const auto& seg = buf.segments[s];
      auto it = landing.find({buf.id, s});
      const auto& pieces = it == landing.end() ? kNone : it->second;
      std::int64_t total = 0;
      for (const Piece* p : pieces) total += p->box.numel();
      if (!pairwise_disjoint(seg, pieces) || total != seg.box.numel())
        return first_bad_element(dst, buf, seg, pieces, rank);
    }
  }
  return "";
}

// Checks plans one process at a time against layouts it recomputes itself. Every check returns
// the first violation as a readable line, or "" when the rule holds.
class PlanChecker {
 public:
  PlanChecker(const vps::Layout& src, const vps::Layout& dst, const std::vector<RankPlan>& plans,
              const SwitchPlacement& placement)
      : src_(src),
        dst_(dst),
        placement_(placement),
        world_(std::max(src.config().world_size(), dst.config().world_size())) {
    for (const auto& p : plans) by_rank_[p.rank] = &p;
  }

  // A placement must put each layout's ranks on distinct processes of the job.
  std::string check_placement() const {
    try {
      placement_.src.validate(src_.config().world_size(), world_);
      placement_.dst.validate(dst_.config().world_size(), world_);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  // All three rules for the plan of one process.
  std::string check_process(const RankPlan& plan) {
    const int r = plan.rank;
    if (r < 0 || r >= world_) return "plan for rank " + std::to_string(r) + " outside the world";
    const vps::RankLayout dst_layout = layout_of(dst_, placement_.dst, r);
    Landing landing;
    for (const auto& p : plan.keep)
      if (auto e = accept(p, r, r, dst_layout, landing); !e.empty()) return e;
    if (auto e = check_receives(plan, dst_layout, landing); !e.empty()) return e;
    if (auto e = check_sends(plan); !e.empty()) return e;
    return check_exact_cover(dst_, dst_layout, landing, r);
  }

 private:
  // The buffers a process holds in a layout: those of the rank placed on it, or none.
  static vps::RankLayout layout_of(const vps::Layout& layout, const Placement& place, int process) {
    const int r = place.rank_of(process, layout.config().world_size());
    return r < 0 ? vps::RankLayout{} : layout.rank_layout(r);
  }

  // The source layout of a process, computed on first use: its rank's buffers, then those of
  // the copies it keeps (SwitchPlacement::copies), numbered on.
  const vps::RankLayout& src_layout(int process) {
    auto it = src_layouts_.find(process);
    if (it != src_layouts_.end()) return it->second;
    vps::RankLayout l = layout_of(src_, placement_.src, process);
    append_copies(src_, placement_, process, l);
    return src_layouts_.emplace(process, std::move(l)).first->second;
  }

  // Rule 1 for a piece process `r` keeps or receives from `expect_src`: filed under the right
  // ranks, inside the destination segment it names and inside a source segment that holds it.
  // An accepted piece is recorded in `landing` for rule 3.
  std::string accept(const Piece& p, int r, int expect_src, const vps::RankLayout& dst_layout, Landing& landing) {
    if (p.tensor >= dst_.tensors().size())
      return "piece " + describe(dst_, p) + " names a tensor the layout does not have";
    if (p.dst_rank != r || p.src_rank != expect_src)
      return "piece " + describe(dst_, p) + " is filed under the wrong rank";
    const vps::Segment* d = named_segment(dst_layout, p.dst_buffer, p.dst_segment, p);
    if (!d || !d->box.contains(p.box))
      return "piece " + describe(dst_, p) + " does not fit the destination segment it names";
    if (p.src_rank < 0 || p.src_rank >= world_)
      return "piece " + describe(dst_, p) + " names a source rank outside the world";
    const vps::Segment* s = named_segment(src_layout(p.src_rank), p.src_buffer, p.src_segment, p);
    if (!s || !s->box.contains(p.box)) return "piece " + describe(dst_, p) + ": the source rank does not hold it";
    landing[{p.dst_buffer, p.dst_segment}].push_back(&p);
    return "";
  }

  // Rules 1 and 2 for what process `plan.rank` receives: each piece is accepted, and a peer
  // whose plan is given sends exactly these pieces.
  std::string check_receives(const RankPlan& plan, const vps::RankLayout& dst_layout, Landing& landing) {
    const int r = plan.rank;
    for (const auto& [peer, pieces] : plan.recv) {
      for (const auto& p : pieces)
        if (auto e = accept(p, r, peer, dst_layout, landing); !e.empty()) return e;
      if (auto it = by_rank_.find(peer); it != by_rank_.end()) {
        auto sit = it->second->send.find(r);
        if (sit == it->second->send.end() || sit->second != pieces)
          return "rank " + std::to_string(peer) + " sends rank " + std::to_string(r) + " other pieces than rank " +
                 std::to_string(r) + " expects";
      }
    }
    return "";
  }

  // Rule 2 from the sending side: pieces filed under the right ranks, and a peer whose plan is
  // given expects something from this process.
  std::string check_sends(const RankPlan& plan) const {
    const int r = plan.rank;
    for (const auto& [peer, pieces] : plan.send) {
      for (const auto& p : pieces)
        if (p.src_rank != r || p.dst_rank != peer)
          return "piece " + describe(dst_, p) + " is filed under the wrong rank";
      if (by_rank_.count(peer) && !by_rank_.at(peer)->recv.count(r))
        return "rank " + std::to_string(r) + " sends to rank " + std::to_string(peer) +
               ", which expects nothing from it";
    }
    return "";
  }

  const vps::Layout& src_;
  const vps::Layout& dst_;
  const SwitchPlacement& placement_;
  const int world_;  // processes
  std::map<int, const RankPlan*> by_rank_;
  std::map<int, vps::RankLayout> src_layouts_;  // by process
};

}  // namespace

CheckResult check_plan(const vps::Layout& src, const vps::Layout& dst, const std::vector<RankPlan>& plans,
                       const SwitchPlacement& placement) {
  PlanChecker checker(src, dst, plans, placement);
  if (auto e = checker.check_placement(); !e.empty()) return {false, std::move(e)};
  for (const auto& plan : plans)
    if (auto e = checker.check_process(plan); !e.empty()) return {false, std::move(e)};
  return {};
}

}  // namespace dynatrain::plan
