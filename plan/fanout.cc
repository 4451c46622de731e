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
// Receives from other nodes of the same (tensor, kind, box), grouped by the receiving node
// (relay groups) or by the sending process (tree groups): key (node or process, tensor, kind,
// box). Zeroed kinds are left out, and so are groups of one.
enum class GroupBy : std::uint8_t { kReceivingNode, kSource };
using GroupKey = std::tuple<int, std::uint32_t, int, vps::Box>;
std::map<GroupKey, std::vector<Member>> group_off_node_receives(const std::vector<RankPlan>& plans,
                                                                const Topology& topo, std::uint32_t zeroed_kinds,
                                                                GroupBy by) {
  std::map<GroupKey, std::vector<Member>> groups;
  for (const auto& plan : plans)
    for (const auto& [peer, pieces] : plan.recv) {
      const int node = topo.node_of(plan.rank);
      if (topo.node_of(peer) == node) continue;
      const int who = by == GroupBy::kReceivingNode ? node : peer;
      for (const auto& p : pieces)
        if (!zeroed(zeroed_kinds, p.kind))
          groups[{who, p.tensor, static_cast<int>(p.kind), p.box}].push_back({plan.rank, p});
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
// buffer (a later stage's identity keep).
Piece identity_keep(int process, std::uint32_t tensor, vps::StateKind kind, const vps::Box& box, std::uint32_t buffer,
                    std::uint32_t segment) {
  Piece k;
  k.tensor = tensor;
  k.kind = kind;
  k.box = box;
  k.src_rank = k.dst_rank = process;
  k.src_buffer = k.dst_buffer = buffer;
  k.src_segment = k.dst_segment = segment;
  return k;
}

// A receive of a stage after the first: `piece` goes from piece.src_rank (reading its
// destination buffer) to piece.dst_rank in stage `stage`.
struct LaterSend {
  std::size_t stage;
  Piece piece;
};

// One write into a destination segment: in which stage, which box.
struct Write {
  std::size_t stage;
  const Piece* piece;
};

// Stage `s`'s keeps on `process`: every destination segment it receives nothing into in stage s
// whole, and in a segment it receives into, exactly the boxes other stages write there
// (`writes`: every stage's writes on this process, by segment).
void add_identity_keeps(const vps::RankLayout& rl, std::size_t s, const std::map<SegKey, std::vector<Write>>& writes,
                        RankPlan& plan) {
  const int me = plan.rank;
  std::set<SegKey> holes;
  for (const auto& [seg, list] : writes)
    for (const Write& w : list)
      if (w.stage == s) holes.insert(seg);
  for (const auto& buf : rl.buffers)
    for (std::uint32_t i = 0; i < buf.segments.size(); ++i) {
      const auto& seg = buf.segments[i];
      if (seg.box.numel() == 0) continue;
      if (!holes.count({buf.id, i})) {
        plan.keep.push_back(identity_keep(me, seg.tensor, buf.kind, seg.box, buf.id, i));
        continue;
      }
      for (const Write& w : writes.at({buf.id, i}))
        if (w.stage != s)
          plan.keep.push_back(identity_keep(me, w.piece->tensor, w.piece->kind, w.piece->box, buf.id, i));
    }
}

// Builds stages 1.. (in place) from stage 0 and the later sends.
std::vector<std::vector<RankPlan>> build_stages(const Planner& planner, std::vector<RankPlan> stage0,
                                                const std::vector<LaterSend>& later, std::size_t count) {
  const int world = static_cast<int>(stage0.size());
  std::vector<std::vector<RankPlan>> stages(count);
  stages[0] = std::move(stage0);
  for (std::size_t s = 1; s < count; ++s) {
    stages[s].resize(world);
    for (int p = 0; p < world; ++p) stages[s][p].rank = p;
  }
  std::vector<std::map<SegKey, std::vector<Write>>> writes(world);
  for (const auto& plan : stages[0]) {
    for (const auto& p : plan.keep) writes[plan.rank][{p.dst_buffer, p.dst_segment}].push_back({0, &p});
    for (const auto& [peer, pieces] : plan.recv)
      for (const auto& p : pieces) writes[plan.rank][{p.dst_buffer, p.dst_segment}].push_back({0, &p});
  }
  for (const LaterSend& l : later) {
    const Piece& q = l.piece;
    stages[l.stage][q.src_rank].send[q.dst_rank].push_back(q);
    stages[l.stage][q.dst_rank].recv[q.src_rank].push_back(q);
    writes[q.dst_rank][{q.dst_buffer, q.dst_segment}].push_back({l.stage, &q});
  }
  for (std::size_t s = 1; s < count; ++s)
    for (int p = 0; p < world; ++p) {
      add_identity_keeps(planner.dst_rank_layout(p), s, writes[p], stages[s][p]);
      sort_plan(stages[s][p]);
    }
  return stages;
}

// A tree's hop: in `stage`, receiver `to` (an index into the tree's receivers) gets the box from
// `from` (-1: the source; otherwise a receiver index).
struct TreeHop {
  std::size_t stage;
  int from, to;
};

// The binomial tree over `receivers` receivers: stage 0 the source sends to receiver 0; in every
// later stage each holder sends to the next receiver that lacks the box, receivers first (in the
// order they got it), the source last and only when `source_resends` (its destination holds the
// box), so the holders double each stage.
std::vector<TreeHop> binomial_tree(int receivers, bool source_resends) {
  std::vector<TreeHop> hops{{0, -1, 0}};
  std::vector<int> holders{0};
  int next = 1;
  for (std::size_t stage = 1; next < receivers; ++stage) {
    std::vector<int> senders = holders;
    if (source_resends) senders.push_back(-1);
    for (int from : senders) {
      if (next == receivers) break;
      hops.push_back({stage, from, next});
      holders.push_back(next++);
    }
  }
  return hops;
}

// The source's destination segment that stage 0 writes `p`'s box into (its own keep), if any.
const Piece* source_copy(const RankPlan& source, const Piece& p) {
  for (const auto& k : source.keep)
    if (k.tensor == p.tensor && k.kind == p.kind && k.box == p.box) return &k;
  return nullptr;
}

// Bytes of `lists` (a plan's sends or receives) to or from other nodes than `plan`'s process.
std::uint64_t off_node_bytes(const RankPlan& plan, const std::map<int, std::vector<Piece>>& lists, const Topology& topo,
                             const vps::ElemBytes& eb, std::uint32_t zeroed_kinds) {
  std::uint64_t n = 0;
  for (const auto& [peer, pieces] : lists)
    if (topo.node_of(peer) != topo.node_of(plan.rank))
      for (const auto& p : pieces)
        if (!zeroed(zeroed_kinds, p.kind)) n += bytes_of(p, eb);
  return n;
}

}  // namespace

std::uint64_t inter_node_bytes_in(const RankPlan& plan, const Topology& topo, const vps::ElemBytes& eb,
                                  std::uint32_t zeroed_kinds) {
  return off_node_bytes(plan, plan.recv, topo, eb, zeroed_kinds);
}

std::uint64_t inter_node_bytes_out(const RankPlan& plan, const Topology& topo, const vps::ElemBytes& eb,
                                   std::uint32_t zeroed_kinds) {
  return off_node_bytes(plan, plan.send, topo, eb, zeroed_kinds);
}

namespace {

// The inputs every candidate shares.
struct FanoutInputs {
  const Planner& planner;
  const std::vector<RankPlan>& plans;
  const vps::ElemBytes& eb;
  const FanoutCosts& costs;
  std::uint32_t zeroed_kinds;
};

// Relay groups: in each, the relay keeps its network receive (in `stage0`); the others' receives
// leave `stage0` and come back as the relay's sends inside the node (`inner`, the last stage).
// Counts go to `fp`; returns the slowest relay's bytes in or out inside its node.
std::uint64_t relay_inside_nodes(const FanoutInputs& in, std::vector<RankPlan>& stage0, std::vector<Piece>& inner,
                                 FanoutPlan& fp) {
  const int world = static_cast<int>(in.plans.size());
  const auto groups =
      group_off_node_receives(in.plans, in.planner.topology(), in.zeroed_kinds, GroupBy::kReceivingNode);
  fp.groups = groups.size();
  std::vector<std::uint64_t> relayed(world, 0);  // bytes each process relays so far (in + out)
  std::vector<std::uint64_t> relay_out(world, 0), relay_in(world, 0);
  for (const auto& [key, members] : groups) {
    // The member that relays the fewest bytes so far relays; ties rotate with the tensor id.
    std::uint64_t least = UINT64_MAX;
    for (const Member& m : members) least = std::min(least, relayed[m.process]);
    std::vector<std::size_t> tied;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (relayed[members[i].process] == least) tied.push_back(i);
    const Member& relay = members[tied[std::get<1>(key) % tied.size()]];
    const std::uint64_t n = bytes_of(relay.piece, in.eb);
    relayed[relay.process] += n * members.size();  // one copy in, members.size() - 1 out
    for (const Member& m : members) {
      if (&m == &relay) continue;
      erase_piece(stage0[m.process].recv, m.piece.src_rank, m.piece);
      erase_piece(stage0[m.piece.src_rank].send, m.process, m.piece);
      Piece q = m.piece;
      q.src_rank = relay.process;
      q.src_buffer = relay.piece.dst_buffer;
      q.src_segment = relay.piece.dst_segment;
      inner.push_back(q);
      relay_out[relay.process] += n;
      relay_in[m.process] += n;
      ++fp.relayed_pieces;
      fp.relayed_bytes += n;
    }
  }
  return std::max(*std::max_element(relay_out.begin(), relay_out.end()),
                  *std::max_element(relay_in.begin(), relay_in.end()));
}

// Tree groups (after relaying): one source, R >= 2 receivers on other nodes. `every`: every
// group takes its tree (--fanout on); otherwise a group takes it when its tree's network stages
// are fewer than its R copies through the source's port (the stages' fixed cost is shared by
// every group, so the whole switch's estimate weighs it). The hops after the first leave
// `stage0` and become `later` sends; counts go to `fp`. Returns the network stages (>= 1).
std::size_t send_by_trees(const FanoutInputs& in, bool every, std::vector<RankPlan>& stage0,
                          std::vector<LaterSend>& later, FanoutPlan& fp) {
  const auto candidates = group_off_node_receives(stage0, in.planner.topology(), in.zeroed_kinds, GroupBy::kSource);
  fp.tree_candidates = candidates.size();
  std::size_t network_stages = 1;
  for (const auto& [key, receivers] : candidates) {
    const int source = std::get<0>(key);
    const Piece* own = source_copy(stage0[source], receivers.front().piece);
    const auto hops = binomial_tree(static_cast<int>(receivers.size()), own != nullptr);
    const std::size_t stages = hops.back().stage + 1;
    if (!every && stages >= receivers.size()) continue;  // stages x b / inter vs R x b / inter
    ++fp.tree_groups;
    network_stages = std::max(network_stages, stages);
    for (const TreeHop& h : hops) {
      if (h.stage == 0) continue;  // the source's stage-1 send stays as planned
      const Member& to = receivers[h.to];
      erase_piece(stage0[to.process].recv, source, to.piece);
      erase_piece(stage0[source].send, to.process, to.piece);
      const Piece& held = h.from < 0 ? *own : receivers[h.from].piece;  // the sender's copy
      Piece q = to.piece;
      q.src_rank = h.from < 0 ? source : receivers[h.from].process;
      q.src_buffer = held.dst_buffer;
      q.src_segment = held.dst_segment;
      later.push_back({h.stage, q});
      if (h.from >= 0) fp.tree_bytes += bytes_of(q, in.eb);
    }
  }
  return network_stages;
}

// One candidate: relay groups, and with `trees` the tree groups (every one when `every`), as
// stages with the rule's estimate and counts; `fp` comes with the figures without fan-out.
// Not applied when there is nothing to relay.
FanoutPlan candidate(const FanoutInputs& in, bool trees, bool every, FanoutPlan fp) {
  const Topology& topo = in.planner.topology();
  const int world = static_cast<int>(in.plans.size());
  std::vector<RankPlan> stage0 = in.plans;
  std::vector<Piece> inner;
  const std::uint64_t hop = relay_inside_nodes(in, stage0, inner, fp);
  std::vector<LaterSend> later;
  const std::size_t network_stages = trees ? send_by_trees(in, every, stage0, later, fp) : 1;
  if (inner.empty() && fp.tree_groups == 0) return fp;
  const std::size_t count = network_stages + (inner.empty() ? 0 : 1);
  for (const Piece& q : inner) later.push_back({count - 1, q});
  fp.stages = build_stages(in.planner, std::move(stage0), later, count);

  // The estimate: every stage's slowest process or node on the network, one after another, the
  // slowest relay's sends inside its node, and each later stage's fixed cost.
  fp.seconds_with = static_cast<double>(count - 1) * in.costs.stage_seconds + static_cast<double>(hop) / in.costs.intra;
  fp.inter_node_bytes = 0;
  std::vector<std::uint64_t> sent(world, 0);
  for (const auto& stage : fp.stages) {
    const NetworkLoad l = network_load(stage, topo, in.eb, in.zeroed_kinds);
    fp.seconds_with += network_seconds(l, topo, in.costs);
    fp.inter_node_bytes += l.total;
    for (int p = 0; p < world; ++p) sent[p] += l.out[p];
  }
  fp.max_sender_bytes = *std::max_element(sent.begin(), sent.end());
  fp.applied = true;
  std::ostringstream why;
  why << fp.groups << " relay groups, " << fp.relayed_bytes << " bytes off the network";
  if (fp.tree_groups > 0) why << ", " << fp.tree_groups << " tree groups over " << network_stages << " network stages";
  why << "; estimated " << fp.seconds_with << " s with fan-out vs " << fp.seconds_without << " s without";
  fp.reason = why.str();
  return fp;
}

}  // namespace

FanoutPlan plan_fanout(const Planner& planner, const std::vector<RankPlan>& plans, const vps::ElemBytes& eb,
                       FanoutMode mode, const FanoutCosts& costs, std::uint32_t zeroed_kinds, bool trees) {
  const Topology& topo = planner.topology();
  const int world = planner.world_size();
  DT_CHECK_EQ(static_cast<int>(plans.size()), world);
  for (int p = 0; p < world; ++p) DT_CHECK_EQ(plans[p].rank, p);

  FanoutPlan without;
  without.stages = {plans};
  const NetworkLoad before = network_load(plans, topo, eb, zeroed_kinds);
  without.inter_node_bytes_without = without.inter_node_bytes = before.total;
  without.max_sender_bytes_without = without.max_sender_bytes = *std::max_element(before.out.begin(), before.out.end());
  without.seconds_without = without.seconds_with = network_seconds(before, topo, costs);
  if (mode == FanoutMode::kOff) {
    without.reason = "off";
    return without;
  }
  const FanoutInputs in{planner, plans, eb, costs, zeroed_kinds};
  const char* nothing = "no box goes to two processes of one node, or to two nodes from one source";
  if (mode == FanoutMode::kOn) {
    FanoutPlan fp = candidate(in, trees, true, without);
    fp.reason = fp.applied ? "on: relayed (" + fp.reason + ")" : nothing;
    return fp;
  }
  // auto: relay groups alone, or with the trees that pay; the lower estimate, if below without.
  FanoutPlan best = candidate(in, false, false, without);
  std::uint64_t tree_candidates = 0;
  if (trees) {
    FanoutPlan with_trees = candidate(in, true, false, without);
    tree_candidates = with_trees.tree_candidates;
    if (with_trees.applied && (!best.applied || with_trees.seconds_with < best.seconds_with))
      best = std::move(with_trees);
  }
  best.tree_candidates = tree_candidates;
  if (!best.applied) {
    best.reason = tree_candidates == 0 ? nothing
                                       : "auto: not relayed (no tree of " + std::to_string(tree_candidates) +
                                             " candidates needs fewer stages than its copies)";
    return best;
  }
  if (best.seconds_with < best.seconds_without) {
    best.reason = "auto: relayed (" + best.reason + ")";
    return best;
  }
  // Not worth it: one stage, as planned; what fan-out would have done stays in the counts.
  FanoutPlan declined = without;
  declined.groups = best.groups;
  declined.relayed_pieces = best.relayed_pieces;
  declined.relayed_bytes = best.relayed_bytes;
  declined.tree_candidates = best.tree_candidates;
  declined.seconds_with = best.seconds_with;
  declined.reason = "auto: not relayed (" + best.reason + ")";
  return declined;
}

namespace {

// Where a box a process holds in one of its destination segments came from: the real holder's
// (process, buffer, segment). Key: (process, dst buffer, dst segment, tensor, kind, box).
using HeldKey = std::tuple<int, std::uint32_t, std::uint32_t, std::uint32_t, int, vps::Box>;
struct Origin {
  int rank;
  std::uint32_t buffer, segment;
};
HeldKey written_key(const Piece& p) {
  return {p.dst_rank, p.dst_buffer, p.dst_segment, p.tensor, static_cast<int>(p.kind), p.box};
}

}  // namespace

CheckResult check_fanout(const vps::Layout& src, const vps::Layout& dst,
                         const std::vector<std::vector<RankPlan>>& stages, const SwitchPlacement& placement) {
  DT_CHECK(!stages.empty(), "check_fanout: no stages");
  if (stages.size() == 1) return check_plan(src, dst, stages[0], placement);
  auto fail = [](std::string what) { return CheckResult{false, std::move(what)}; };
  // What stage 1 wrote where, from which real holder.
  std::map<HeldKey, Origin> held;
  for (const auto& plan : stages[0]) {
    for (const auto& p : plan.keep) held[written_key(p)] = {p.src_rank, p.src_buffer, p.src_segment};
    for (const auto& [peer, v] : plan.recv)
      for (const auto& p : v) held[written_key(p)] = {p.src_rank, p.src_buffer, p.src_segment};
  }
  std::vector<RankPlan> whole = stages[0];
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < whole.size(); ++i) index[whole[i].rank] = i;
  for (std::size_t s = 1; s < stages.size(); ++s) {
    const std::string stage = "stage " + std::to_string(s + 1) + ": ";
    // Alone: an exact cover of the destination layout from itself, keeps in place.
    if (auto r = check_plan(dst, dst, stages[s], {placement.dst, placement.dst}); !r.ok)
      return fail(stage + r.violation);
    for (const auto& plan : stages[s])
      for (const auto& k : plan.keep)
        if (k.src_buffer != k.dst_buffer || k.src_segment != k.dst_segment)
          return fail(stage + "process " + std::to_string(plan.rank) + " keeps a box of buffer " +
                      std::to_string(k.src_buffer) + " in another place");
    // Every receive traced back to the real holder behind its sender; what it writes is held
    // from the next stage on (a box received in this stage cannot be sent on in it).
    std::vector<std::pair<HeldKey, Origin>> now;
    for (const auto& plan : stages[s])
      for (const auto& [sender, pieces] : plan.recv)
        for (const auto& q : pieces) {
          const auto it = held.find({sender, q.src_buffer, q.src_segment, q.tensor, static_cast<int>(q.kind), q.box});
          if (it == held.end())
            return fail(stage + "process " + std::to_string(sender) + " sends box " + q.box.str() + " to process " +
                        std::to_string(plan.rank) + " but no earlier stage writes it there");
          Piece t = q;
          t.src_rank = it->second.rank;
          t.src_buffer = it->second.buffer;
          t.src_segment = it->second.segment;
          if (!index.count(t.dst_rank) || !index.count(t.src_rank))
            return fail(stage + "a piece names a process without a stage-1 plan");
          if (t.src_rank == t.dst_rank) {
            whole[index[t.dst_rank]].keep.push_back(t);
          } else {
            whole[index[t.dst_rank]].recv[t.src_rank].push_back(t);
            whole[index[t.src_rank]].send[t.dst_rank].push_back(t);
          }
          now.push_back({written_key(q), it->second});
        }
    for (const auto& [key, origin] : now) held[key] = origin;
  }
  for (auto& p : whole) sort_plan(p);
  if (auto r = check_plan(src, dst, whole, placement); !r.ok) return fail("all stages: " + r.violation);
  return {};
}

}  // namespace dynatrain::plan
