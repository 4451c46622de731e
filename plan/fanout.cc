#include "plan/fanout.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "plan/planner.h"

namespace dynatrain::plan {

FanoutMode parse_fanout_mode(const std::string& text) {
  if (text == "off") return FanoutMode::kOff;
  if (text == "auto") return FanoutMode::kAuto;
  if (text == "on") return FanoutMode::kOn;
  DT_INPUT_ERROR("fan-out mode '", text, "' is not one of off, auto, on");
}

const char* fanout_mode_name(FanoutMode mode) {
  switch (mode) {
    case FanoutMode::kOff: return "off";
    case FanoutMode::kAuto: return "auto";
    case FanoutMode::kOn: return "on";
  }
  return "?";
}

namespace {

using SegKey = std::pair<std::uint32_t, std::uint32_t>;  // (destination buffer, segment)

bool zeroed(std::uint32_t zeroed_kinds, vps::StateKind k) { return (zeroed_kinds >> static_cast<int>(k)) & 1u; }

std::uint64_t bytes_of(const Piece& p, const vps::ElemBytes& eb) {
  return static_cast<std::uint64_t>(p.box.numel()) * static_cast<std::uint64_t>(eb[static_cast<int>(p.kind)]);
}

// Bytes each process receives from / sends to other nodes (counted on the receiving side).
struct NetworkLoad {
  std::vector<std::uint64_t> in, out;
  std::uint64_t total = 0;
};
NetworkLoad network_load(const std::vector<RankPlan>& plans, const Topology& topo, const vps::ElemBytes& eb,
                         std::uint32_t zeroed_kinds) {
  NetworkLoad l;
  l.in.assign(plans.size(), 0);
  l.out.assign(plans.size(), 0);
  for (const auto& plan : plans) {
    l.in[plan.rank] = inter_node_bytes_in(plan, topo, eb, zeroed_kinds);
    l.total += l.in[plan.rank];
    for (const auto& [peer, pieces] : plan.recv)
      if (topo.node_of(peer) != topo.node_of(plan.rank))
        for (const auto& p : pieces)
          if (!zeroed(zeroed_kinds, p.kind)) l.out[peer] += bytes_of(p, eb);
  }
  return l;
}

// The slowest process or node on the network, in and out: per process over `inter`, per node
// over `node_inter` (the processes of a node share its NICs).
double network_seconds(const NetworkLoad& l, const Topology& topo, const FanoutCosts& c) {
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> node;  // node -> (in, out)
  double s = 0;
  for (std::size_t p = 0; p < l.in.size(); ++p) {
    s = std::max(s, static_cast<double>(std::max(l.in[p], l.out[p])) / c.inter);
    auto& n = node[topo.node_of(static_cast<int>(p))];
    n.first += l.in[p];
    n.second += l.out[p];
  }
  for (const auto& [id, io] : node) s = std::max(s, static_cast<double>(std::max(io.first, io.second)) / c.node_inter);
  return s;
}

// One receive that may be relayed: the receiving process and the piece as planned.
struct Member {
  int process;
  Piece piece;
};
// Relay groups: (node, tensor, kind, box) -> the off-node receives of that box on that node.
using GroupKey = std::tuple<int, std::uint32_t, int, vps::Box>;

std::map<GroupKey, std::vector<Member>> find_groups(const std::vector<RankPlan>& plans, const Topology& topo,
                                                    std::uint32_t zeroed_kinds) {
  std::map<GroupKey, std::vector<Member>> groups;
  for (const auto& plan : plans)
    for (const auto& [peer, pieces] : plan.recv) {
      const int node = topo.node_of(plan.rank);
      if (topo.node_of(peer) == node) continue;
      for (const auto& p : pieces)
        if (!zeroed(zeroed_kinds, p.kind))
          groups[{node, p.tensor, static_cast<int>(p.kind), p.box}].push_back({plan.rank, p});
    }
  std::erase_if(groups, [](const auto& g) { return g.second.size() < 2; });
  return groups;
}

void sort_plan(RankPlan& plan) {
  std::sort(plan.keep.begin(), plan.keep.end(), piece_order);
  for (auto& [peer, pieces] : plan.send) std::sort(pieces.begin(), pieces.end(), piece_order);
  for (auto& [peer, pieces] : plan.recv) std::sort(pieces.begin(), pieces.end(), piece_order);
}

void erase_piece(std::map<int, std::vector<Piece>>& lists, int peer, const Piece& p) {
  auto it = lists.find(peer);
  DT_CHECK(it != lists.end(), "fan-out: no list for peer ", peer);
  auto& v = it->second;
  const auto at = std::find(v.begin(), v.end(), p);
  DT_CHECK(at != v.end(), "fan-out: piece to remove not in the plan");
  v.erase(at);
  if (v.empty()) lists.erase(it);
}

// The piece that rebuilds, on `process`, the destination bytes of `p` from its own destination
// buffer (stage 2's identity keep).
Piece identity_keep(int process, std::uint32_t tensor, vps::StateKind kind, const vps::Box& box,
                    std::uint32_t buffer, std::uint32_t segment) {
  Piece k;
  k.tensor = tensor;
  k.kind = kind;
  k.box = box;
  k.src_rank = k.dst_rank = process;
  k.src_buffer = k.dst_buffer = buffer;
  k.src_segment = k.dst_segment = segment;
  return k;
}

// Stage 2's keeps on `process`: every destination segment whole, except segments with holes
// (`holes`), which keep exactly what stage 1 wrote into them.
void add_stage2_keeps(const vps::RankLayout& rl, const RankPlan& stage1, const std::set<SegKey>& holes,
                      RankPlan& stage2) {
  const int me = stage2.rank;
  std::map<SegKey, std::vector<const Piece*>> written;  // holed segment -> stage-1 pieces in it
  auto note = [&](const Piece& p) {
    if (holes.count({p.dst_buffer, p.dst_segment})) written[{p.dst_buffer, p.dst_segment}].push_back(&p);
  };
  for (const auto& p : stage1.keep) note(p);
  for (const auto& [peer, pieces] : stage1.recv)
    for (const auto& p : pieces) note(p);
  for (const auto& buf : rl.buffers)
    for (std::uint32_t s = 0; s < buf.segments.size(); ++s) {
      const auto& seg = buf.segments[s];
      if (seg.box.numel() == 0) continue;
      if (!holes.count({buf.id, s})) {
        stage2.keep.push_back(identity_keep(me, seg.tensor, buf.kind, seg.box, buf.id, s));
        continue;
      }
      for (const Piece* p : written[{buf.id, s}])
        stage2.keep.push_back(identity_keep(me, p->tensor, p->kind, p->box, buf.id, s));
    }
}

}  // namespace

std::uint64_t inter_node_bytes_in(const RankPlan& plan, const Topology& topo, const vps::ElemBytes& eb,
                                  std::uint32_t zeroed_kinds) {
  std::uint64_t n = 0;
  for (const auto& [peer, pieces] : plan.recv)
    if (topo.node_of(peer) != topo.node_of(plan.rank))
      for (const auto& p : pieces)
        if (!zeroed(zeroed_kinds, p.kind)) n += bytes_of(p, eb);
  return n;
}

FanoutPlan plan_fanout(const Planner& planner, const std::vector<RankPlan>& plans, const vps::ElemBytes& eb,
                       FanoutMode mode, const FanoutCosts& costs, std::uint32_t zeroed_kinds) {
  const Topology& topo = planner.topology();
  const int world = planner.world_size();
  DT_CHECK_EQ(static_cast<int>(plans.size()), world);
  for (int p = 0; p < world; ++p) DT_CHECK_EQ(plans[p].rank, p);

  FanoutPlan fp;
  fp.stage1 = plans;
  const NetworkLoad before = network_load(plans, topo, eb, zeroed_kinds);
  fp.inter_node_bytes_without = fp.inter_node_bytes = before.total;
  fp.seconds_without = fp.seconds_with = network_seconds(before, topo, costs);
  const auto groups = find_groups(plans, topo, zeroed_kinds);
  fp.groups = groups.size();
  if (mode == FanoutMode::kOff || groups.empty()) {
    fp.reason = mode == FanoutMode::kOff ? "off" : "no box goes to two processes of one node from another node";
    return fp;
  }

  // Relays and holes.
  std::vector<std::uint64_t> relayed(world, 0);      // bytes each process relays so far (in + out)
  std::vector<std::uint64_t> relay_out(world, 0), relay_in(world, 0);
  std::vector<std::set<SegKey>> holes(world);
  fp.stage2.resize(world);
  for (int p = 0; p < world; ++p) fp.stage2[p].rank = p;
  for (const auto& [key, members] : groups) {
    // The member that relays the fewest bytes so far relays; ties rotate with the tensor id.
    std::uint64_t least = UINT64_MAX;
    for (const Member& m : members) least = std::min(least, relayed[m.process]);
    std::vector<std::size_t> tied;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (relayed[members[i].process] == least) tied.push_back(i);
    const Member& relay = members[tied[std::get<1>(key) % tied.size()]];
    const std::uint64_t n = bytes_of(relay.piece, eb);
    relayed[relay.process] += n * members.size();  // one copy in, members.size() - 1 out
    for (const Member& m : members) {
      if (&m == &relay) continue;
      // Stage 1: the network receive goes; stage 2: the relay sends it inside the node.
      erase_piece(fp.stage1[m.process].recv, m.piece.src_rank, m.piece);
      erase_piece(fp.stage1[m.piece.src_rank].send, m.process, m.piece);
      Piece q = m.piece;
      q.src_rank = relay.process;
      q.src_buffer = relay.piece.dst_buffer;
      q.src_segment = relay.piece.dst_segment;
      fp.stage2[relay.process].send[m.process].push_back(q);
      fp.stage2[m.process].recv[relay.process].push_back(q);
      holes[m.process].insert({q.dst_buffer, q.dst_segment});
      relay_out[relay.process] += n;
      relay_in[m.process] += n;
      ++fp.relayed_pieces;
      fp.relayed_bytes += n;
    }
  }

  // Stage 2's keeps (identities: it runs in place, exec::TransitionOptions::in_place).
  for (int p = 0; p < world; ++p) {
    add_stage2_keeps(planner.dst_rank_layout(p), fp.stage1[p], holes[p], fp.stage2[p]);
    sort_plan(fp.stage2[p]);
  }

  const NetworkLoad after = network_load(fp.stage1, topo, eb, zeroed_kinds);
  const std::uint64_t hop = std::max(*std::max_element(relay_out.begin(), relay_out.end()),
                                     *std::max_element(relay_in.begin(), relay_in.end()));
  fp.seconds_with = network_seconds(after, topo, costs) + static_cast<double>(hop) / costs.intra + costs.stage_seconds;
  const bool worth = fp.seconds_with < fp.seconds_without;
  std::ostringstream why;
  why << fp.groups << " relay groups, " << fp.relayed_bytes << " bytes off the network; estimated "
      << fp.seconds_with << " s with fan-out vs " << fp.seconds_without << " s without";
  if (mode == FanoutMode::kAuto && !worth) {
    fp.stage1 = plans;
    fp.stage2.clear();
    fp.reason = "auto: not relayed (" + why.str() + ")";
    return fp;
  }
  fp.applied = true;
  fp.inter_node_bytes = after.total;
  fp.reason = std::string(mode == FanoutMode::kOn ? "on" : "auto") + ": relayed (" + why.str() + ")";
  return fp;
}

CheckResult check_fanout(const vps::Layout& src, const vps::Layout& dst, const std::vector<RankPlan>& stage1,
                         const std::vector<RankPlan>& stage2, const SwitchPlacement& placement) {
  if (stage2.empty()) return check_plan(src, dst, stage1, placement);
  auto fail = [](std::string what) { return CheckResult{false, std::move(what)}; };
  // Stage 2 alone: an exact cover of the destination layout from itself, keeps in place.
  if (auto r = check_plan(dst, dst, stage2, {placement.dst, placement.dst}); !r.ok)
    return fail("stage 2: " + r.violation);
  for (const auto& plan : stage2)
    for (const auto& k : plan.keep)
      if (k.src_buffer != k.dst_buffer || k.src_segment != k.dst_segment)
        return fail("stage 2: process " + std::to_string(plan.rank) + " keeps a box of buffer " +
                    std::to_string(k.src_buffer) + " in another place");
  // Stage 1 plus every relayed piece traced back to the source that feeds its relay.
  std::map<int, const RankPlan*> first;
  for (const auto& p : stage1) first[p.rank] = &p;
  std::vector<RankPlan> whole = stage1;
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < whole.size(); ++i) index[whole[i].rank] = i;
  for (const auto& plan : stage2)
    for (const auto& [relay, pieces] : plan.recv)
      for (const auto& q : pieces) {
        const Piece* fed = nullptr;
        if (auto it = first.find(relay); it != first.end()) {
          auto same = [&](const Piece& p) {
            return p.tensor == q.tensor && p.kind == q.kind && p.box == q.box && p.dst_buffer == q.src_buffer &&
                   p.dst_segment == q.src_segment;
          };
          for (const auto& p : it->second->keep)
            if (same(p)) fed = &p;
          for (const auto& [peer, v] : it->second->recv)
            for (const auto& p : v)
              if (same(p)) fed = &p;
        }
        if (!fed)
          return fail("stage 2: process " + std::to_string(relay) + " relays box " + q.box.str() +
                      " to process " + std::to_string(plan.rank) + " but stage 1 does not write it there");
        Piece t = q;
        t.src_rank = fed->src_rank;
        t.src_buffer = fed->src_buffer;
        t.src_segment = fed->src_segment;
        if (!index.count(t.dst_rank) || !index.count(t.src_rank))
          return fail("stage 2: a relayed piece names a process without a stage-1 plan");
        if (t.src_rank == t.dst_rank) {
          whole[index[t.dst_rank]].keep.push_back(t);
        } else {
          whole[index[t.dst_rank]].recv[t.src_rank].push_back(t);
          whole[index[t.src_rank]].send[t.dst_rank].push_back(t);
        }
      }
  for (auto& p : whole) sort_plan(p);
  if (auto r = check_plan(src, dst, whole, placement); !r.ok) return fail("stages 1 + 2: " + r.violation);
  return {};
}

}  // namespace dynatrain::plan
