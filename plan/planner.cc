#include "plan/planner.h"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <span>

#include "common/error.h"
#include "plan/copies.h"

namespace dynatrain::plan {

bool piece_order(const Piece& a, const Piece& b) {
  if (a.dst_buffer != b.dst_buffer) return a.dst_buffer < b.dst_buffer;
  if (a.dst_segment != b.dst_segment) return a.dst_segment < b.dst_segment;
  return a.box < b.box;
}

namespace {

using vps::Box;

struct Holder {
  int rank = 0;
  std::uint32_t buffer = 0;
  std::uint32_t segment = 0;
};

// One distinct box of a (tensor, kind) in one layout, with every rank that holds it.
struct UniqueBox {
  Box box;
  std::span<const Holder> holders;        // sorted by rank; storage in the Unit
  std::int64_t hull_lo = 0, hull_hi = 0;  // row-major hull in the full tensor
};

// All boxes of one (tensor, kind), in both layouts, plus an interval index over the source's.
struct Unit {
  std::vector<UniqueBox> src, dst;               // src sorted by hull_lo
  std::vector<Holder> src_holders, dst_holders;  // what the boxes' holder spans point into
  std::vector<std::int64_t> src_prefix_max_hi;
  bool src_disjoint = true;  // unique source boxes partition the tensor
};

struct Entry {
  Box box;
  Holder holder;
};

// Sorts entries into distinct boxes; every box's holders are one run of `holders` (one
// allocation per unit and side, not one per box).
std::vector<UniqueBox> group_boxes(std::vector<Entry>& entries, const Box& full, std::vector<Holder>& holders) {
  // By box, then rank (so each box's holders come out sorted by rank).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    for (int d = 0; d < a.box.ndim; ++d) {
      if (a.box.lo[d] != b.box.lo[d]) return a.box.lo[d] < b.box.lo[d];
      if (a.box.hi[d] != b.box.hi[d]) return a.box.hi[d] < b.box.hi[d];
    }
    return a.holder.rank < b.holder.rank;
  });
  holders.clear();
  holders.reserve(entries.size());
  std::vector<UniqueBox> out;
  std::vector<std::size_t> first;  // holder index where each box's run starts
  for (const Entry& e : entries) {
    if (out.empty() || out.back().box != e.box) {
      UniqueBox u;
      u.box = e.box;
      u.hull_lo = full.linear_index(e.box.lo);
      vps::Coord last = e.box.hi;
      for (int d = 0; d < e.box.ndim; ++d) --last[d];
      u.hull_hi = full.linear_index(last) + 1;
      out.push_back(u);
      first.push_back(holders.size());
    }
    holders.push_back(e.holder);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t end = i + 1 < out.size() ? first[i + 1] : holders.size();
    out[i].holders = std::span<const Holder>(holders.data() + first[i], end - first[i]);
  }
  return out;
}

}  // namespace

Planner::Planner(const vps::Layout& src, const vps::Layout& dst, Topology topology, SwitchPlacement placement)
    : src_(src), dst_(dst), topology_(topology), placement_(std::move(placement)) {
  if (src.tensors().size() != dst.tensors().size() || src.model().name != dst.model().name)
    DT_INPUT_ERROR("source and destination layouts describe different models ('", src.model().name, "' vs '",
                   dst.model().name, "')");
  if (src.options().kinds != dst.options().kinds)
    DT_INPUT_ERROR("source and destination layouts carry different state kinds");
  if (topology_.gpus_per_node < 1) DT_INPUT_ERROR("gpus per node must be at least 1, got ", topology_.gpus_per_node);
  placement_.src.validate(src_.config().world_size(), world_size());
  placement_.dst.validate(dst_.config().world_size(), world_size());
  for (int p : placement_.lost)
    if (p < 0 || p >= world_size())
      DT_INPUT_ERROR("lost process ", p, " outside the switch's processes 0..", world_size() - 1);
  for (const auto& c : placement_.copies)
    if (c.rank < 0 || c.rank >= src_.config().world_size() || c.process < 0 || c.process >= world_size())
      DT_INPUT_ERROR("copy of rank ", c.rank, " on process ", c.process, ": valid are ranks 0..",
                     src_.config().world_size() - 1, " on processes 0..", world_size() - 1);
}

Planner::~Planner() = default;

int Planner::world_size() const {
  return std::max(
      {src_.config().world_size(), dst_.config().world_size(), placement_.src.processes(), placement_.dst.processes()});
}

int Planner::src_rank_of(int process) const { return placement_.src.rank_of(process, src_.config().world_size()); }

int Planner::dst_rank_of(int process) const { return placement_.dst.rank_of(process, dst_.config().world_size()); }

vps::RankLayout Planner::src_rank_layout(int process) const {
  const int r = src_rank_of(process);
  vps::RankLayout out = r < 0 ? vps::RankLayout{} : src_.rank_layout(r);
  append_copies(src_, placement_, process, out);
  return out;
}

vps::RankLayout Planner::dst_rank_layout(int process) const {
  const int r = dst_rank_of(process);
  return r < 0 ? vps::RankLayout{} : dst_.rank_layout(r);
}

namespace {

// Kinds with the same element size and the same sharding in both configs have identical
// segment lists (layout.h), so one plan serves them all: rep[k] is the first such kind, and a
// piece of rep[k] becomes a piece of k by shifting its buffer ids by the kinds' index distance.
struct KindClasses {
  std::array<int, vps::kNumStateKinds> rep{};
  std::array<int, vps::kNumStateKinds> index{};  // position in LayoutOptions::kinds
  std::vector<vps::StateKind> kinds;

  KindClasses(const vps::Layout& src, const vps::Layout& dst) : kinds(src.options().kinds) {
    rep.fill(-1);
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      const int k = static_cast<int>(kinds[i]);
      index[k] = static_cast<int>(i);
      rep[k] = k;
      for (std::size_t j = 0; j < i; ++j) {
        const int r = static_cast<int>(kinds[j]);
        if (rep[r] == r && src.options().elem_bytes[r] == src.options().elem_bytes[k] &&
            vps::is_sharded(kinds[j], src.config().zero) == vps::is_sharded(kinds[i], src.config().zero) &&
            vps::is_sharded(kinds[j], dst.config().zero) == vps::is_sharded(kinds[i], dst.config().zero)) {
          rep[k] = r;
          break;
        }
      }
    }
  }
};

// The representative kinds (of `kinds`) a copy is a source for: those with a kind of their class
// that the copy keeps (SwitchPlacement::Copy::absent_kinds).
unsigned copy_source_kinds(const KindClasses& classes, unsigned kinds, std::uint32_t absent_kinds) {
  unsigned kept = 0;
  for (const vps::StateKind kind : classes.kinds) {
    const int k = static_cast<int>(kind);
    if (!(absent_kinds >> k & 1u)) kept |= 1u << classes.rep[k];
  }
  return kinds & kept;
}

// A copy holds its rank's boxes where that rank's process is lost and the copy's is not: its
// segments enter the source entries as held by the copy's process, at its shifted buffer ids.
void add_copy_holders(const vps::Layout& src, const SwitchPlacement& placement, const std::vector<bool>& gone,
                      const KindClasses& classes, unsigned kinds, const std::vector<bool>& wanted,
                      std::vector<std::vector<Entry>>& entries) {
  if (placement.copies.empty()) return;
  const std::vector<std::uint32_t> bases = copy_bases(src, placement);
  auto is_gone = [&](int p) { return p < static_cast<int>(gone.size()) && gone[static_cast<std::size_t>(p)]; };
  for (std::size_t i = 0; i < placement.copies.size(); ++i) {
    const auto& c = placement.copies[i];
    if (!is_gone(placement.src.process_of(c.rank)) || is_gone(c.process)) continue;
    src.visit_buffers(
        c.rank,
        [&](const vps::LocalBuffer& buf, const std::vector<vps::Segment>& segs) {
          for (std::uint32_t s = 0; s < segs.size(); ++s) {
            const std::size_t u = segs[s].tensor * vps::kNumStateKinds + static_cast<int>(buf.kind);
            if (wanted.empty() || wanted[u]) entries[u].push_back({segs[s].box, {c.process, bases[i] + buf.id, s}});
          }
        },
        copy_source_kinds(classes, kinds, c.absent_kinds));
  }
}

std::vector<Unit> index_units(const vps::Layout& src, std::vector<std::vector<Entry>>& src_entries,
                              std::vector<std::vector<Entry>>& dst_entries);

// Builds the unit index for the representative (tensor, kind) pairs selected by `wanted` (all
// when empty). Ranks whose pipeline stage holds no wanted tensor are not laid out at all.
// Holders are processes: layout rank r is held by placement.{src,dst}.process_of(r).
std::vector<Unit> build_units(const vps::Layout& src, const vps::Layout& dst, const SwitchPlacement& placement,
                              const KindClasses& classes, const std::vector<bool>& wanted) {
  const std::size_t n_units = src.tensors().size() * vps::kNumStateKinds;
  std::vector<std::vector<Entry>> src_entries(n_units), dst_entries(n_units);
  // Unsharded kinds' segments depend only on a rank's (tp, pp, ep, etp) coordinates, so they
  // are laid out once per such class and copied to the class's other ranks (dp/cp replicas).
  unsigned all_mask = 0;  // representative kinds
  for (int k = 0; k < vps::kNumStateKinds; ++k)
    if (classes.rep[k] == k) all_mask |= 1u << k;
  int processes = std::max(src.config().world_size(), placement.src.processes());
  for (int p : placement.lost) processes = std::max(processes, p + 1);
  std::vector<bool> gone(static_cast<std::size_t>(processes), false);
  for (int p : placement.lost) gone[static_cast<std::size_t>(p)] = true;
  // `holds(process)`: whether that process's boxes count (a lost source process's do not).
  auto collect = [&](const vps::Layout& layout, const Placement& place, std::vector<std::vector<Entry>>& entries,
                     auto&& holds) {
    const auto& c = layout.config();
    unsigned sharded = 0;
    for (int k = 0; k < vps::kNumStateKinds; ++k)
      if ((all_mask >> k & 1u) && vps::is_sharded(static_cast<vps::StateKind>(k), c.zero)) sharded |= 1u << k;
    struct Template {
      std::size_t unit;
      Box box;
      std::uint32_t buffer, segment;
    };
    std::map<std::array<int, 4>, std::vector<Template>> class_templates;
    const int per_stage = c.tp * c.cp * c.dp;
    for (int stage = 0; stage < c.pp; ++stage) {
      if (!wanted.empty()) {
        bool any = false;
        for (const auto& shard : layout.local_shards(stage * per_stage))
          for (int k = 0; k < vps::kNumStateKinds && !any; ++k) any = wanted[shard.tensor * vps::kNumStateKinds + k];
        if (!any) continue;
      }
      for (int r = stage * per_stage; r < (stage + 1) * per_stage; ++r) {
        const int process = place.process_of(r);
        const bool held = holds(process);
        const vps::RankCoords rc = vps::rank_coords(c, r);
        auto [tmpl, fresh] = class_templates.try_emplace({rc.tp, rc.pp, rc.ep, rc.etp});
        layout.visit_buffers(
            r,
            [&](const vps::LocalBuffer& buf, const std::vector<vps::Segment>& segs) {
              const int k = static_cast<int>(buf.kind);
              const bool is_template = !(sharded >> k & 1u);
              for (std::uint32_t s = 0; s < segs.size(); ++s) {
                const std::size_t u = segs[s].tensor * vps::kNumStateKinds + k;
                if (!wanted.empty() && !wanted[u]) continue;
                if (is_template)
                  tmpl->second.push_back({u, segs[s].box, buf.id, s});
                else if (held)
                  entries[u].push_back({segs[s].box, {process, buf.id, s}});
              }
            },
            fresh ? all_mask : sharded);
        if (held)
          for (const Template& t : tmpl->second) entries[t.unit].push_back({t.box, {process, t.buffer, t.segment}});
      }
    }
  };
  collect(src, placement.src, src_entries, [&](int p) { return !gone[static_cast<std::size_t>(p)]; });
  add_copy_holders(src, placement, gone, classes, all_mask, wanted, src_entries);
  collect(dst, placement.dst, dst_entries, [](int) { return true; });
  return index_units(src, src_entries, dst_entries);
}

// The units from the collected entries: distinct boxes per side, the source's interval index.
std::vector<Unit> index_units(const vps::Layout& src, std::vector<std::vector<Entry>>& src_entries,
                              std::vector<std::vector<Entry>>& dst_entries) {
  const std::size_t n_units = src_entries.size();
  std::vector<Unit> units(n_units);
  for (std::size_t u = 0; u < n_units; ++u) {
    if (dst_entries[u].empty()) continue;
    const Box full = src.tensors()[u / vps::kNumStateKinds].full_box();
    Unit& unit = units[u];
    unit.src = group_boxes(src_entries[u], full, unit.src_holders);
    unit.dst = group_boxes(dst_entries[u], full, unit.dst_holders);
    std::sort(unit.src.begin(), unit.src.end(),
              [](const UniqueBox& a, const UniqueBox& b) { return a.hull_lo < b.hull_lo; });
    std::int64_t covered = 0, running = 0;
    for (const auto& s : unit.src) {
      covered += s.box.numel();
      running = std::max(running, s.hull_hi);
      unit.src_prefix_max_hi.push_back(running);
    }
    unit.src_disjoint = covered == full.numel();
  }
  return units;
}

// Subtracts `cut` from `box`, appending up to 2*ndim boxes that cover box \ cut.
void subtract(const Box& box, const Box& cut, std::vector<Box>& out) {
  const Box inter = intersect(box, cut);
  if (inter.empty()) {
    out.push_back(box);
    return;
  }
  Box rest = box;
  for (int d = 0; d < box.ndim; ++d) {
    if (rest.lo[d] < inter.lo[d]) {
      Box below = rest;
      below.hi[d] = inter.lo[d];
      out.push_back(below);
    }
    if (inter.hi[d] < rest.hi[d]) {
      Box above = rest;
      above.lo[d] = inter.hi[d];
      out.push_back(above);
    }
    rest.lo[d] = inter.lo[d];
    rest.hi[d] = inter.hi[d];
  }
}

// Source boxes of `unit` that intersect d, in ascending hull order (the interval index).
void find_source_candidates(const Unit& unit, const UniqueBox& d, std::vector<int>& out) {
  out.clear();
  const auto& src = unit.src;
  auto upper = std::lower_bound(src.begin(), src.end(), d.hull_hi,
                                [](const UniqueBox& s, std::int64_t v) { return s.hull_lo < v; });
  for (int i = static_cast<int>(upper - src.begin()) - 1; i >= 0; --i) {
    if (unit.src_prefix_max_hi[i] <= d.hull_lo) break;
    if (src[i].hull_hi > d.hull_lo && !intersect(src[i].box, d.box).empty()) out.push_back(i);
  }
  std::reverse(out.begin(), out.end());
}

// Assigns sources for one unit; calls emit(piece) for every piece in a deterministic order.
class UnitPlanner {
 public:
  UnitPlanner(const Unit& unit, std::uint32_t tensor, vps::StateKind kind, int elem_bytes, const Topology& topo,
              int world, std::vector<std::int64_t>& load, std::vector<int>& touched)
      : unit_(unit),
        tensor_(tensor),
        kind_(kind),
        elem_bytes_(elem_bytes),
        topo_(topo),
        world_(world),
        load_(load),
        touched_(touched) {}

  template <typename Emit>
  void run(Emit&& emit) {
    std::vector<int> candidates;
    std::vector<Box> remaining, next;
    for (const UniqueBox& d : unit_.dst) {
      find_candidates(d, candidates);
      for (const Holder& dh : d.holders) {
        if (unit_.src_disjoint) {
          for (int c : candidates) {
            const Box piece = intersect(d.box, unit_.src[c].box);
            if (!piece.empty()) emit(make_piece(piece, unit_.src[c], dh));
          }
          continue;
        }
        // Overlapping sources: cover the destination box greedily, most preferred source first.
        std::vector<int> order = candidates;
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return preference(a, dh.rank) < preference(b, dh.rank); });
        remaining.assign(1, d.box);
        for (int c : order) {
          next.clear();
          for (const Box& r : remaining) {
            const Box piece = intersect(r, unit_.src[c].box);
            if (piece.empty()) {
              next.push_back(r);
              continue;
            }
            emit(make_piece(piece, unit_.src[c], dh));
            subtract(r, piece, next);
          }
          remaining.swap(next);
          if (remaining.empty()) break;
        }
        DT_CHECK(remaining.empty(), "no source holds part of ", d.box.str());
      }
    }
    for (int r : touched_) load_[r] = 0;
    touched_.clear();
  }

 private:
  void find_candidates(const UniqueBox& d, std::vector<int>& out) const { find_source_candidates(unit_, d, out); }

  // Where `dst_rank` stands among a box's holders (sorted by rank): the holder that is the rank
  // itself (or nullptr), else the run [first, last) of holders on its node.
  struct Nearby {
    const Holder* self = nullptr;
    const Holder* first = nullptr;
    const Holder* last = nullptr;
  };
  Nearby nearby(std::span<const Holder> hs, int dst_rank) const {
    auto by_rank = [](const Holder& h, int r) { return h.rank < r; };
    Nearby n;
    auto self = std::lower_bound(hs.begin(), hs.end(), dst_rank, by_rank);
    if (self != hs.end() && self->rank == dst_rank) {
      n.self = &*self;
      return n;  // the node run is not needed then
    }
    const int node = topo_.node_of(dst_rank);
    n.first = hs.data() + (std::lower_bound(hs.begin(), hs.end(), node * topo_.gpus_per_node, by_rank) - hs.begin());
    n.last =
        hs.data() + (std::lower_bound(hs.begin(), hs.end(), (node + 1) * topo_.gpus_per_node, by_rank) - hs.begin());
    return n;
  }

  // 0: the destination rank holds it; 1: a holder on its node; 2: otherwise.
  int preference(int c, int dst_rank) const {
    const Nearby n = nearby(unit_.src[c].holders, dst_rank);
    return n.self ? 0 : n.first != n.last ? 1 : 2;
  }

  // The rank itself if it holds the box; else among the holders on its node (or, if none, all
  // holders) the least loaded; ties go round-robin over that list with a start seeded by
  // (tensor, kind), so that equally loaded replicas share work across tensors.
  const Holder& choose(const UniqueBox& s, int dst_rank) const {
    const Nearby near = nearby(s.holders, dst_rank);
    if (near.self) return *near.self;
    const Holder* first = near.first;
    const Holder* last = near.last;
    if (first == last) {
      first = s.holders.data();
      last = first + s.holders.size();
    }
    const auto n = static_cast<std::uint64_t>(last - first);
    const std::uint64_t seed = tensor_ * 31u + static_cast<unsigned>(kind_) * 7u;
    std::uint64_t at = seed % n;
    const Holder* best = &first[at];
    for (std::uint64_t k = 1; k < n; ++k) {
      if (++at == n) at = 0;
      if (load_[first[at].rank] < load_[best->rank]) best = &first[at];
    }
    return *best;
  }

  Piece make_piece(const Box& box, const UniqueBox& s, const Holder& dst) {
    const Holder& src = choose(s, dst.rank);
    if (src.rank != dst.rank) {
      if (load_[src.rank] == 0) touched_.push_back(src.rank);
      load_[src.rank] += box.numel() * elem_bytes_;
    }
    return Piece{tensor_, kind_, box, src.rank, src.buffer, src.segment, dst.rank, dst.buffer, dst.segment};
  }

  const Unit& unit_;
  std::uint32_t tensor_;
  vps::StateKind kind_;
  int elem_bytes_;
  const Topology& topo_;
  int world_;
  std::vector<std::int64_t>& load_;
  std::vector<int>& touched_;
};

// Plans every representative unit and emits its pieces, plus their copies for equivalent kinds.
template <typename Emit>
void plan_units(const vps::Layout& src, const std::vector<Unit>& units, const KindClasses& classes,
                const Topology& topo, int world, Emit&& emit) {
  std::vector<std::int64_t> load(world, 0);
  std::vector<int> touched;
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].dst.empty()) continue;
    const auto kind = static_cast<vps::StateKind>(u % vps::kNumStateKinds);
    UnitPlanner planner(units[u], static_cast<std::uint32_t>(u / vps::kNumStateKinds), kind,
                        src.options().elem_bytes[static_cast<int>(kind)], topo, world, load, touched);
    planner.run([&](const Piece& p) {
      emit(p);
      for (auto other : classes.kinds) {
        const int k = static_cast<int>(other);
        if (k == static_cast<int>(kind) || classes.rep[k] != static_cast<int>(kind)) continue;
        Piece copy = p;
        const int shift = classes.index[k] - classes.index[static_cast<int>(kind)];
        copy.kind = other;
        copy.src_buffer += shift;
        copy.dst_buffer += shift;
        emit(copy);
      }
    });
  }
}

void add_piece(RankPlan& plan, const Piece& p) {
  if (p.src_rank == p.dst_rank)
    plan.keep.push_back(p);
  else if (p.src_rank == plan.rank)
    plan.send[p.dst_rank].push_back(p);
  else
    plan.recv[p.src_rank].push_back(p);
}

void sort_plan(RankPlan& plan) {
  std::sort(plan.keep.begin(), plan.keep.end(), piece_order);
  for (auto& [peer, pieces] : plan.send) std::sort(pieces.begin(), pieces.end(), piece_order);
  for (auto& [peer, pieces] : plan.recv) std::sort(pieces.begin(), pieces.end(), piece_order);
}

}  // namespace

RankPlan Planner::plan_rank(int rank) const {
  DT_CHECK(rank >= 0 && rank < world_size(), "rank ", rank, " outside world ", world_size());
  // Only the (tensor, kind) units this process holds in either layout can involve it.
  std::vector<bool> wanted(src_.tensors().size() * vps::kNumStateKinds, false);
  for (const auto& rank_layout : {src_rank_layout(rank), dst_rank_layout(rank)})
    for (const auto& buf : rank_layout.buffers)
      for (const auto& seg : buf.segments) wanted[seg.tensor * vps::kNumStateKinds + static_cast<int>(buf.kind)] = true;
  const KindClasses classes(src_, dst_);
  for (std::size_t u = 0; u < wanted.size(); ++u)
    if (wanted[u]) wanted[u - u % vps::kNumStateKinds + classes.rep[u % vps::kNumStateKinds]] = true;
  const auto units = build_units(src_, dst_, placement_, classes, wanted);
  RankPlan plan;
  plan.rank = rank;
  plan_units(src_, units, classes, topology_, world_size(), [&](const Piece& p) {
    if (p.src_rank == rank || p.dst_rank == rank) add_piece(plan, p);
  });
  sort_plan(plan);
  return plan;
}

std::vector<RankPlan> Planner::plan_all() const {
  const KindClasses classes(src_, dst_);
  const auto units = build_units(src_, dst_, placement_, classes, {});
  std::vector<RankPlan> plans(world_size());
  for (int r = 0; r < world_size(); ++r) plans[r].rank = r;
  plan_units(src_, units, classes, topology_, world_size(), [&](const Piece& p) {
    add_piece(plans[p.dst_rank], p);
    if (p.src_rank != p.dst_rank) add_piece(plans[p.src_rank], p);
  });
  for (auto& plan : plans) sort_plan(plan);
  return plans;
}

std::vector<std::string> Planner::unheld(std::size_t limit) const {
  const KindClasses classes(src_, dst_);
  const auto units = build_units(src_, dst_, placement_, classes, {});
  std::vector<std::string> out;
  std::vector<int> candidates;
  std::vector<Box> remaining, next;
  for (std::size_t u = 0; u < units.size() && out.size() < limit; ++u) {
    for (const UniqueBox& d : units[u].dst) {
      find_source_candidates(units[u], d, candidates);
      remaining.assign(1, d.box);
      for (int c : candidates) {
        next.clear();
        for (const Box& r : remaining) subtract(r, units[u].src[c].box, next);
        remaining.swap(next);
      }
      if (remaining.empty()) continue;
      std::string kinds;  // the kinds planned alike with this one lack it alike
      for (auto k : classes.kinds)
        if (classes.rep[static_cast<int>(k)] == static_cast<int>(u % vps::kNumStateKinds))
          kinds += (kinds.empty() ? "" : "/") + std::string(vps::state_kind_name(k));
      out.push_back(src_.tensors()[u / vps::kNumStateKinds].name + " " + kinds + " " + remaining.front().str());
      if (out.size() == limit) break;
    }
  }
  return out;
}

Affinity Planner::affinity() const {
  DT_CHECK(placement_.dst.is_identity(), "affinity() places destination ranks itself");
  const KindClasses classes(src_, dst_);
  const auto units = build_units(src_, dst_, placement_, classes, {});
  Affinity a;
  a.ranks = dst_.config().world_size();
  a.processes = world_size();
  a.nodes = (a.processes + topology_.gpus_per_node - 1) / topology_.gpus_per_node;
  a.need.assign(a.ranks, 0);
  a.on_process.assign(static_cast<std::size_t>(a.ranks) * a.processes, 0);
  a.on_node.assign(static_cast<std::size_t>(a.ranks) * a.nodes, 0);
  std::vector<int> candidates;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const Unit& unit = units[u];
    if (unit.dst.empty()) continue;
    // Kinds sharing this unit's plan (KindClasses) share its bytes too.
    const int kind = static_cast<int>(u % vps::kNumStateKinds);
    std::uint64_t elem_bytes = 0;
    for (auto k : classes.kinds)
      if (classes.rep[static_cast<int>(k)] == kind) elem_bytes += src_.options().elem_bytes[static_cast<int>(k)];
    for (const UniqueBox& d : unit.dst) {
      for (const Holder& q : d.holders) a.need[q.rank] += d.box.numel() * elem_bytes;
      find_source_candidates(unit, d, candidates);
      for (int c : candidates) {
        const UniqueBox& s = unit.src[c];
        const std::uint64_t bytes = intersect(d.box, s.box).numel() * elem_bytes;
        if (bytes == 0) continue;
        for (const Holder& q : d.holders) {
          std::uint64_t* by_process = &a.on_process[static_cast<std::size_t>(q.rank) * a.processes];
          std::uint64_t* by_node = &a.on_node[static_cast<std::size_t>(q.rank) * a.nodes];
          int last_node = -1;  // holders are sorted by process, so a node's holders are adjacent
          for (const Holder& h : s.holders) {
            by_process[h.rank] += bytes;
            const int node = topology_.node_of(h.rank);
            if (node != last_node) by_node[node] += bytes;
            last_node = node;
          }
        }
      }
    }
  }
  return a;
}

}  // namespace dynatrain::plan
