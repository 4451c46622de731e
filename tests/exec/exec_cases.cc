#include "testing/seed.h"
#include "tests/exec/exec_cases.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>

#include "common/error.h"
#include "testing/fill.h"
#include "exec/machine_rates.h"
#include "exec/pool_allocator.h"
#include "testing/state_oracle.h"
#include "plan/planner.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

namespace dynatrain::exec::cases {
using namespace dynatrain::testing;

std::string TransitionCase::name() const {
  std::string s = kind + "_" + model + "_" + from + "_to_" + to;
  if (budget % (1 << 20) == 0 && budget < (64 << 20)) s += "_" + std::to_string(budget >> 20) + "MiB";
  if (order == WaveOrder::kAscending) s += "_asc";
  if (order == WaveOrder::kDescending) s += "_desc";
  if (zeroed_kinds != 0) s += fill_zeroed ? "_stepboundary" : "_stepboundary_unset";
  if (align_pages) s += "_aligned";
  if (!direct_runs) s += "_packed";
  if (!commit_ahead) s += "_not_ahead";
  if (gpus_per_node > 0) s += "_nodes" + std::to_string(gpus_per_node);
  if (rounds_in_flight > 0) s += "_depth" + std::to_string(rounds_in_flight);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

namespace {

std::vector<vps::ParallelConfig> valid_configs(const vps::ModelSpec& m, int max_world) {
  std::vector<vps::ParallelConfig> out;
  for (int tp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (int cp : {1, 2})
        for (int dp = 1; dp <= 8; ++dp)
          for (int ep : {1, 2, 4})
            for (int etp : {1, 2})
              for (int zero : {0, 1, 2, 3}) {
                if (tp * pp * cp * dp > max_world) continue;
                if (!m.is_moe() && (ep > 1 || etp > 1)) continue;
                if ((tp * cp * dp) % (ep * etp) != 0) continue;
                vps::ParallelConfig c;
                c.tp = tp, c.pp = pp, c.cp = cp, c.dp = dp, c.ep = ep, c.etp = etp, c.zero = zero;
                try {
                  c.validate_for(m);
                } catch (const InputError&) {
                  continue;
                }
                out.push_back(c);
              }
  return out;
}

int dims_changed(const vps::ParallelConfig& a, const vps::ParallelConfig& b) {
  return (a.tp != b.tp) + (a.pp != b.pp) + (a.dp != b.dp) + (a.cp != b.cp) + (a.ep != b.ep) + (a.etp != b.etp) +
         (a.zero != b.zero);
}

bool matches(const std::string& kind, const vps::ParallelConfig& a, const vps::ParallelConfig& b) {
  const int wa = a.world_size(), wb = b.world_size();
  auto same_except = [&](bool tp, bool pp, bool dp, bool ep, bool zero) {
    return (tp || a.tp == b.tp) && (pp || a.pp == b.pp) && (dp || a.dp == b.dp) && a.cp == b.cp &&
           (ep || a.ep == b.ep) && a.etp == b.etp && (zero || a.zero == b.zero);
  };
  if (kind == "tp") return a.tp != b.tp && wa == wb && same_except(true, false, true, false, false);
  if (kind == "pp") return a.pp != b.pp && wa == wb && same_except(false, true, true, false, false);
  if (kind == "dp") return a.dp != b.dp && same_except(false, false, true, false, false);
  if (kind == "ep") return a.ep != b.ep && same_except(false, false, false, true, false);
  if (kind == "zero") return a.zero != b.zero && same_except(false, false, false, false, true);
  if (kind == "grow") return wa < wb && dims_changed(a, b) >= 2;
  if (kind == "shrink") return wa > wb && dims_changed(a, b) >= 2;
  if (kind == "hybrid") return dims_changed(a, b) >= 3;
  return false;
}

}  // namespace

vps::ModelSpec case_model(const std::string& name) {
  if (name != "mid-dense" && name != "mid-moe") return vps::model_from_name(name);
  // tiny-dense / tiny-moe scaled up (the same heads, so the same configs are valid): one
  // 40M-element bucket holds a whole state kind, 2-16 MiB per buffer.
  vps::ModelSpec m = vps::model_from_name(name == "mid-dense" ? "tiny-dense" : "tiny-moe");
  m.name = name;
  m.hidden = 256;
  m.head_dim = m.hidden / m.heads;
  m.vocab = 2048;
  if (m.is_moe())
    m.expert_ffn = 128;
  else
    m.ffn = 704;
  return m;
}

std::vector<TransitionCase> large_buffer_cases(int ranks, std::size_t budget) {
  std::vector<TransitionCase> out;
  for (TransitionCase c : transition_cases(ranks, 1)) {
    if (c.kind == "bigbudget") continue;
    c.model = c.model == "tiny-moe" ? "mid-moe" : "mid-dense";
    c.bucket_elems = 40'000'000;  // Megatron's default bucket
    c.budget = budget;
    c.align_pages = out.size() % 2 == 1;
    c.direct_runs = out.size() % 3 != 2;  // every third: only contiguous chunks unpacked
    out.push_back(c);
  }
  return out;
}

std::vector<TransitionCase> two_class_cases(int ranks) {
  std::vector<TransitionCase> out = transition_cases(ranks, 1);
  const auto large = large_buffer_cases(ranks, std::size_t{4} << 20);
  out.insert(out.end(), large.begin(), large.begin() + std::min<std::size_t>(3, large.size()));
  for (auto& c : out) c.gpus_per_node = 2;
  return out;
}

std::vector<TransitionCase> transition_cases(int ranks, int per_kind) {
  std::mt19937 rng(testing::test_seed(static_cast<std::uint32_t>(1000 + ranks)));  // DT_TEST_SEED
  std::vector<TransitionCase> out;
  const char* kinds[] = {"tp", "pp", "dp", "ep", "zero", "grow", "shrink", "hybrid"};
  for (const char* kind : kinds) {
    const std::string model = std::string(kind) == "ep" || (out.size() % 2 == 1) ? "tiny-moe" : "tiny-dense";
    const vps::ModelSpec m = vps::model_from_name(model);
    const auto configs = valid_configs(m, ranks);
    std::vector<std::pair<std::size_t, std::size_t>> pairs, full;
    for (std::size_t i = 0; i < configs.size(); ++i)
      for (std::size_t j = 0; j < configs.size(); ++j)
        if (i != j && matches(kind, configs[i], configs[j])) {
          pairs.emplace_back(i, j);
          if (std::max(configs[i].world_size(), configs[j].world_size()) == ranks) full.emplace_back(i, j);
        }
    // Prefer switches that use every rank; fall back to smaller ones.
    const auto& pool = full.empty() ? pairs : full;
    for (int k = 0; k < per_kind && !pool.empty(); ++k) {
      const auto [i, j] = pool[rng() % pool.size()];
      TransitionCase c;
      c.kind = kind;
      c.model = model;
      c.from = configs[i].str();
      c.to = configs[j].str();
      c.world = std::max(configs[i].world_size(), configs[j].world_size());
      out.push_back(c);
    }
  }
  // Fixed: a ZeRO + TP switch with both wave orders forced, and with a budget that holds
  // everything (one wave, one chunk per peer).
  if (ranks >= 2) {
    TransitionCase c;
    c.kind = "fixed";
    c.model = "tiny-moe";
    c.from = "dp=" + std::to_string(ranks) + ",zero=1";
    c.to = ranks % 2 == 0 ? "tp=2,dp=" + std::to_string(ranks / 2) + ",ep=2,zero=2"
                          : "dp=" + std::to_string(ranks - 1) + ",zero=3";
    c.world = ranks;
    for (WaveOrder o : {WaveOrder::kAscending, WaveOrder::kDescending}) {
      c.order = o;
      out.push_back(c);
    }
    c.order = WaveOrder::kAuto;
    c.budget = 64 << 20;
    c.kind = "bigbudget";
    out.push_back(c);
    // At a step boundary: gradients materialised zeroed, not moved.
    c.budget = 512 << 10;
    c.kind = "fixed";
    c.zeroed_kinds = kStepBoundaryKinds;
    out.push_back(c);
  }
  return out;
}

namespace {

// The engine's options for case `c`: its budget, wave order, zeroed kinds, direct runs, nodes
// and rounds in flight.
TransitionOptions case_options(const TransitionCase& c) {
  TransitionOptions opt;
  opt.mem_budget = c.budget;
  opt.order = c.order;
  opt.zeroed_kinds = c.zeroed_kinds;
  opt.fill_zeroed = c.fill_zeroed;
  opt.direct_runs = c.direct_runs;
  opt.commit_ahead = c.commit_ahead;
  if (c.gpus_per_node > 0) {
    opt.topology.gpus_per_node = c.gpus_per_node;
    opt.overlap_links = LinkOverlap::kOn;
  }
  opt.rounds_in_flight = c.rounds_in_flight;
  opt.keep_path = c.keep_path;
  opt.progress = c.progress;
  return opt;
}

// Two link classes where the transport's ranks span nodes (LinkOverlap::kAuto) or the case
// puts them on nodes (kOn); rounds overlap only across two classes.
void check_link_classes(const TransitionCase& c, comm::Transport& t, const TransitionStats& s) {
  bool nodes = c.gpus_per_node > 0 && t.size() > c.gpus_per_node;
  for (int r = 0; r < t.size(); ++r) nodes |= t.node_of(r) != t.node_of(0);
  CASE_REQUIRE(s.link_classes == (nodes ? 2u : 1u), s.link_classes);
  CASE_REQUIRE(nodes || s.overlapped_rounds == 0, s.overlapped_rounds);
}

// Bytes and messages: what the plan says. Zeroed kinds move nothing: their bytes are counted as
// skipped instead.
void check_plan_bytes(const TransitionCase& c, comm::Transport& t, const plan::RankPlan& plan,
                      const vps::ElemBytes& elem_bytes, const vps::RankLayout& dl, const TransitionStats& s) {
  auto bytes_of = [&](const plan::Piece& p) {
    return static_cast<std::uint64_t>(p.box.numel()) * static_cast<std::uint64_t>(elem_bytes[static_cast<int>(p.kind)]);
  };
  std::uint64_t want[2][3] = {};  // [moved, skipped][sent, received, kept]
  auto skipped = [&](const plan::Piece& p) { return (c.zeroed_kinds >> static_cast<int>(p.kind)) & 1u; };
  std::size_t peers_sent_to = 0;
  for (const auto& [q, v] : plan.send) {
    bool any = false;
    for (const auto& p : v) want[skipped(p)][0] += bytes_of(p), any |= !skipped(p);
    peers_sent_to += any;
  }
  for (const auto& [q, v] : plan.recv)
    for (const auto& p : v) want[skipped(p)][1] += bytes_of(p);
  for (const auto& p : plan.keep) want[skipped(p)][2] += bytes_of(p);
  CASE_REQUIRE(s.bytes_sent == want[0][0], s.bytes_sent, " vs ", want[0][0]);
  CASE_REQUIRE(s.bytes_received == want[0][1], s.bytes_received, " vs ", want[0][1]);
  CASE_REQUIRE(s.bytes_kept == want[0][2], s.bytes_kept, " vs ", want[0][2]);
  CASE_REQUIRE(s.kept_zero_copy_bytes + s.kept_remapped_bytes <= s.bytes_kept);
  CASE_REQUIRE(s.kept_remapped_bytes % kPageBytes == 0, s.kept_remapped_bytes);
  CASE_REQUIRE(s.skipped_bytes_sent == want[1][0] && s.skipped_bytes_received == want[1][1] &&
               s.skipped_bytes_kept == want[1][2]);
  CASE_REQUIRE(c.zeroed_kinds == 0 || (c.fill_zeroed ? s.zeroed_bytes : s.unset_bytes) > 0 || dl.buffers.empty());
  CASE_REQUIRE(c.fill_zeroed ? s.unset_bytes == 0 : s.zeroed_bytes == 0 && s.zeroed_in_place_bytes == 0, s.zeroed_bytes,
               " zeroed, ", s.unset_bytes, " unset");
  CASE_REQUIRE(s.messages >= peers_sent_to, s.messages, " messages for ", peers_sent_to, " peers");
  CASE_REQUIRE(s.bytes_sent_direct <= s.bytes_sent && s.bytes_received_direct <= s.bytes_received);
  CASE_REQUIRE((s.bytes_sent_direct > 0) == (s.zero_copy_sends > 0) &&
               (s.bytes_received_direct > 0) == (s.zero_copy_recvs > 0));
}

// Memory: staging within budget, prediction exact, peak within max(src, dst) + budget, and the
// pool in agreement with the engine.
void check_memory(const TransitionCase& c, comm::Transport& t, const vps::LayoutOptions& lo, const vps::RankLayout& sl,
                  const vps::RankLayout& dl, const PoolAllocator& pool, const TransitionStats& s) {
  CASE_REQUIRE(s.staging_bytes <= c.budget / 2, s.staging_bytes);
  CASE_REQUIRE(s.src_bytes == static_cast<std::uint64_t>(sl.bytes(lo)));
  CASE_REQUIRE(s.dst_bytes == static_cast<std::uint64_t>(dl.bytes(lo)));
  CASE_REQUIRE(s.peak_bytes == s.predicted_peak_bytes, s.peak_bytes, " vs predicted ", s.predicted_peak_bytes);
  // The bound is promised for the order the engine chooses (kAuto); a forced order is a
  // debugging aid and may overshoot (exec/README.md), its peak is still predicted exactly.
  if (c.order == WaveOrder::kAuto)
    CASE_REQUIRE(s.peak_bytes <= std::max(s.src_bytes, s.dst_bytes) + c.budget, "peak ", s.peak_bytes, " src ",
                 s.src_bytes, " dst ", s.dst_bytes, " budget ", c.budget);
  // The pool agrees with the engine up to its rounding (64 bytes, or a page for mapped blocks).
  const std::size_t slack = kPageBytes * (sl.buffers.size() + dl.buffers.size() + 2);
  CASE_REQUIRE(pool.peak_live() <= s.peak_bytes + slack, pool.peak_live(), " vs ", s.peak_bytes);
  CASE_REQUIRE(pool.live_bytes() >= s.dst_bytes && pool.live_bytes() <= s.dst_bytes + slack);
}

// With fill_zeroed false: counts the non-zero bytes the engine left in the zeroed kinds'
// destination buffers (into c.unset_left), then zeroes them, as the caller of such a switch does.
void zero_unset(const TransitionCase& c, const vps::Layout& dst, const vps::RankLayout& dl,
                std::vector<std::byte*>& b) {
  const vps::ElemBytes& eb = dst.options().elem_bytes;  // the layout's own, as release_all reads them
  for (std::size_t i = 0; i < dl.buffers.size(); ++i) {
    const vps::LocalBuffer& buf = dl.buffers[i];
    if (!((c.zeroed_kinds >> static_cast<int>(buf.kind)) & 1u) || b[i] == nullptr) continue;
    const auto bytes = static_cast<std::size_t>(buf.numel) * static_cast<std::size_t>(eb[static_cast<int>(buf.kind)]);
    if (c.unset_left)
      *c.unset_left +=
          static_cast<std::uint64_t>(std::count_if(b[i], b[i] + bytes, [](std::byte x) { return x != std::byte{0}; }));
    std::memset(b[i], 0, bytes);
  }
}

}  // namespace

TransitionStats run_case(const TransitionCase& c, comm::Transport& t) {
  CASE_REQUIRE(t.size() >= c.world, "case needs ", c.world, " ranks");
  const vps::ModelSpec model = case_model(c.model);
  vps::LayoutOptions lo;
  lo.bucket_elems = c.bucket_elems;
  if (c.align_pages) lo.align_elems = vps::kPageAlignElems;
  const vps::Layout src(model, vps::ParallelConfig::parse(c.from), lo);
  const vps::Layout dst(model, vps::ParallelConfig::parse(c.to), lo);
  const int me = t.rank();
  const plan::Planner planner(src, dst);
  const plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  const vps::RankLayout sl = src.rank_layout(me), dl = dst.rank_layout(me);

  PoolAllocator pool(c.huge_pages, case_options(c));
  std::vector<std::byte*> a = allocate_filled(src, sl, pool), b;
  const TransitionStats s = run_transition(plan, sl, a, dl, b, lo.elem_bytes, t, pool, case_options(c));
  check_link_classes(c, t, s);

  if (!c.fill_zeroed) zero_unset(c, dst, dl, b);
  // Content: every destination element.
  std::string first;
  CASE_REQUIRE(verify_state(dst, dl, b, &first, c.zeroed_kinds) == 0, first);
  // Sources all released, destination all present.
  for (auto* p : a) CASE_REQUIRE(p == nullptr);
  CASE_REQUIRE(b.size() == dl.buffers.size());
  check_plan_bytes(c, t, plan, lo.elem_bytes, dl, s);
  if (c.progress)
    CASE_REQUIRE(c.progress->load() == s.bytes_sent + s.bytes_received + s.bytes_kept - s.kept_zero_copy_bytes,
                 c.progress->load(), " bytes of progress");
  check_memory(c, t, lo, sl, dl, pool, s);
  // Every rank agrees on the wave count.
  const auto waves = gather_u64(t, s.waves);
  for (auto w : waves) CASE_REQUIRE(w == s.waves, "wave counts differ");
  release_all(dst, dl, b, pool);
  CASE_REQUIRE(pool.live_bytes() == 0);
  t.barrier();
  return s;
}

void message_count_case(comm::Transport& t) {
  TransitionCase c;
  c.kind = "messages";
  c.model = "tiny-dense";
  c.from = "tp=4,zero=0";
  c.to = "dp=4,zero=0";
  c.world = 4;
  CASE_REQUIRE(t.size() == 4);
  c.budget = 256 << 20;
  const TransitionStats big = run_case(c, t);
  CASE_REQUIRE(big.messages == 3, big.messages);  // one message per peer
  CASE_REQUIRE(big.waves == 1, big.waves);
  // Each rank receives 3/4 of every tp-split tensor of every kind: check the byte count exactly.
  const vps::ModelSpec model = vps::model_from_name(c.model);
  std::uint64_t want = 0;
  const vps::ElemBytes eb = vps::LayoutOptions{}.elem_bytes;
  for (const auto& ts : vps::build_tensors(model)) {
    if (ts.split == vps::TpSplit::kReplicated) continue;
    for (int k = 0; k < vps::kNumStateKinds; ++k)
      want += static_cast<std::uint64_t>(ts.numel()) * static_cast<std::uint64_t>(eb[k]) * 3 / 4;
  }
  CASE_REQUIRE(big.bytes_received == want, big.bytes_received, " vs ", want);
  // A budget 256x smaller cuts the same bytes into more messages, never more than a chunk each.
  c.budget = 1 << 20;
  const TransitionStats small = run_case(c, t);
  CASE_REQUIRE(small.bytes_received == want);
  CASE_REQUIRE(small.messages >= (small.bytes_sent + small.chunk_bytes - 1) / small.chunk_bytes, small.messages);
  CASE_REQUIRE(small.messages > 3, small.messages);
}

void sends_ahead_case(comm::Transport& t) {
  TransitionCase c;
  c.kind = "ahead";
  c.model = "tiny-dense";
  c.from = "tp=2,dp=2,zero=1";
  c.to = "tp=2,dp=1,zero=1";
  c.zeroed_kinds = kStepBoundaryKinds;
  c.world = 4;
  CASE_REQUIRE(t.size() == 4);
  const TransitionStats s = run_case(c, t);
  if (t.rank() < 2) {  // they receive only
    CASE_REQUIRE(s.messages == 0 && s.sends_ahead == 0, s.messages, " messages, ", s.sends_ahead, " ahead");
    return;
  }
  CASE_REQUIRE(s.messages > 4, s.messages, " messages");
  // Over a runs pair every send is direct and all but those posted in their own round (the
  // first rounds in flight) go ahead; without runs (Gloo) none does.
  if (t.runs_direct(t.rank() - 2))
    CASE_REQUIRE(s.zero_copy_sends == s.messages && s.sends_ahead > 0 && s.sends_ahead + 2 >= s.messages,
                 s.zero_copy_sends, " direct and ", s.sends_ahead, " ahead of ", s.messages);
  else
    CASE_REQUIRE(s.sends_ahead == 0, s.sends_ahead);
}

// Receives committed ahead: a lend of ranks 2-3's state onto ranks 0-1 at a step boundary, on
// 2-16 MiB buffers (page-wise at a 4 MiB budget). Ranks 0-1 commit what they receive into before
// the exchange, in fewer allocator calls than granule stretch by stretch between receives; ranks
// 2-3 only send and commit nothing. Both ways every byte is verified and the peak predicted
// exactly and within max(S, D) + B (run_case).
void commit_ahead_case(comm::Transport& t) {
  TransitionCase c{.kind = "commitahead",
                   .model = "mid-dense",
                   .from = "tp=2,dp=2,zero=1",
                   .to = "tp=2,dp=1,zero=1",
                   .bucket_elems = 40'000'000,
                   .budget = 4 << 20,
                   .world = 4,
                   .zeroed_kinds = kStepBoundaryKinds};
  CASE_REQUIRE(t.size() == 4);
  const TransitionStats ahead = run_case(c, t);
  c.commit_ahead = false;
  const TransitionStats plain = run_case(c, t);
  CASE_REQUIRE(plain.committed_ahead_bytes == 0, plain.committed_ahead_bytes);
  if (t.rank() >= 2) {
    CASE_REQUIRE(ahead.committed_ahead_bytes == 0 && ahead.bytes_received == 0, ahead.committed_ahead_bytes);
    return;
  }
  // Whole granules: at least every byte received.
  CASE_REQUIRE(ahead.committed_ahead_bytes >= ahead.bytes_received && ahead.bytes_received > 0,
               ahead.committed_ahead_bytes, " committed ahead, ", ahead.bytes_received, " received");
  CASE_REQUIRE(ahead.commit_calls * 4 < plain.commit_calls, ahead.commit_calls, " commits vs ", plain.commit_calls);
}

void link_overlap_case(comm::Transport& t) {
  TransitionCase c{.kind = "overlap",
                   .model = "tiny-dense",
                   .from = "tp=4,zero=0",
                   .to = "dp=4,zero=0",
                   .budget = 64 << 10,
                   .world = 4,
                   .gpus_per_node = 2};
  CASE_REQUIRE(t.size() == 4);
  const TransitionStats on = run_case(c, t);
  c.gpus_per_node = 0;
  const TransitionStats off = run_case(c, t);
  c.rounds_in_flight = 5;
  const TransitionStats deep = run_case(c, t);
  CASE_REQUIRE(on.link_classes == 2 && off.link_classes == 1 && deep.link_classes == 1);
  CASE_REQUIRE(on.rounds_in_flight == kAutoRoundsInFlight[1] && off.rounds_in_flight == kAutoRoundsInFlight[0] &&
               deep.rounds_in_flight == 5);
  // Each class's pipeline has its own staging slots, one per round in flight and direction
  // (2 intra-node + 8 inter-node by default): chunks shrink so that staging stays <= B / 2
  // (asserted by run_case).
  const std::uint64_t slots[3] = {kAutoRoundsInFlight[0] + kAutoRoundsInFlight[1], kAutoRoundsInFlight[0], 5};
  for (int i = 0; const TransitionStats* s : {&on, &off, &deep}) {
    CASE_REQUIRE(s->chunk_bytes == c.budget / (4 * slots[i]) / 8 * 8, s->chunk_bytes);
    ++i;
  }
  for (const TransitionStats* s : {&on, &deep})
    CASE_REQUIRE(
        s->bytes_received == off.bytes_received && s->bytes_sent == off.bytes_sent && s->messages > off.messages,
        s->messages, " vs ", off.messages);
  CASE_REQUIRE(off.overlapped_rounds == 0 && deep.overlapped_rounds == 0);
  // Rounds of two peers per class: most are finished with a round of the other class in flight.
  CASE_REQUIRE(on.overlapped_rounds * 2 > on.messages, on.overlapped_rounds, " of ", on.messages, " rounds");
}

void strided_direct_case(comm::Transport& t) {
  TransitionCase c{.kind = "strided",
                   .model = "mid-dense",
                   .from = "tp=2,zero=0",
                   .to = "dp=2,zero=0",
                   .bucket_elems = 40'000'000,
                   .world = 2};
  CASE_REQUIRE(t.size() == 2);
  const bool runs = t.runs_direct(1 - t.rank());
  for (std::size_t budget : {std::size_t{4} << 20, std::size_t{64} << 20}) {
    c.budget = budget;
    c.direct_runs = true;
    const TransitionStats on = run_case(c, t);
    c.direct_runs = false;
    const TransitionStats off = run_case(c, t);
    CASE_REQUIRE(on.bytes_received > 0 && on.bytes_received == off.bytes_received);
    // Received: strided slices with long runs direct only with runs; short runs always staged.
    CASE_REQUIRE(off.bytes_received_direct < off.bytes_received, off.bytes_received_direct);
    if (runs) {
      // The shard is contiguous at the sender: with runs every chunk goes unpacked, also those
      // that hold several pieces (without, only chunks of one piece do).
      CASE_REQUIRE(on.bytes_sent_direct == on.bytes_sent, on.bytes_sent_direct, " of ", on.bytes_sent);
      CASE_REQUIRE(budget < (64u << 20) || off.bytes_sent_direct < off.bytes_sent, off.bytes_sent_direct, " of ",
                   off.bytes_sent);  // 64 MiB chunks hold several pieces
      CASE_REQUIRE(on.bytes_received_direct > off.bytes_received_direct, on.bytes_received_direct, " vs ",
                   off.bytes_received_direct);
      // At 4 MiB a chunk holds one slice: the 512-byte runs are staged. At 64 MiB a chunk mixes
      // them with long runs and averages above the rule: everything lands in place.
      if (budget < (64u << 20))
        CASE_REQUIRE(on.bytes_received_direct < on.bytes_received, on.bytes_received_direct);
      else
        CASE_REQUIRE(on.bytes_received_direct == on.bytes_received, on.bytes_received_direct);
      CASE_REQUIRE(on.staging_bytes <= off.staging_bytes, on.staging_bytes, " vs ", off.staging_bytes);
    } else {
      CASE_REQUIRE(on.bytes_received_direct == off.bytes_received_direct &&
                   on.bytes_sent_direct == off.bytes_sent_direct);
    }
  }
}

void absent_source_case(comm::Transport& t) {
  TransitionCase c;  // for the failure messages
  c.kind = "absent";
  c.model = "tiny-dense";
  c.from = "dp=4,zero=1";
  c.to = "dp=2,zero=1";
  CASE_REQUIRE(t.size() == 4);
  const vps::ModelSpec model = vps::model_from_name("tiny-dense");
  const vps::LayoutOptions lo;
  const vps::Layout src(model, vps::ParallelConfig::parse("dp=4,zero=1"), lo);
  const vps::Layout dst(model, vps::ParallelConfig::parse("dp=2,zero=1"), lo);
  const plan::SwitchPlacement placement{{}, {}, {}, {{2, 0}, {3, 1}}};
  const plan::Planner planner(src, dst, {}, placement);
  const int me = t.rank();
  const plan::RankPlan plan = planner.plan_rank(me);
  const vps::RankLayout own = src.rank_layout(me), sl = planner.src_rank_layout(me), dl = dst.rank_layout(me);
  CASE_REQUIRE(sl.buffers.size() == (me < 2 ? 2 : 1) * own.buffers.size(), sl.buffers.size());
  TransitionOptions opt;
  opt.mem_budget = 512 << 10;
  PoolAllocator pool(HugePages::kAuto, opt);

  // A source the plan reads, absent: refused on every rank before any message.
  std::vector<std::byte*> a = allocate_filled(src, own, pool), b;
  a.resize(sl.buffers.size(), nullptr);
  std::size_t moment = 0;
  while (own.buffers[moment].kind != vps::StateKind::kExpAvg) ++moment;
  auto bytes = [&](std::size_t i) {
    return static_cast<std::size_t>(own.buffers[i].numel) * lo.elem_bytes[static_cast<int>(own.buffers[i].kind)];
  };
  pool.release(a[moment], bytes(moment));
  a[moment] = nullptr;
  std::string refused;
  try {
    run_transition(plan, sl, a, dl, b, lo.elem_bytes, t, pool, opt);
  } catch (const InvariantError& e) {
    refused = e.what();
  }
  CASE_REQUIRE(
      refused.find("source buffer " + std::to_string(moment) + " has no data but the plan reads") != std::string::npos,
      "refusal: '", refused, "'");
  for (std::size_t i = 0; i < own.buffers.size(); ++i)
    if (a[i] != nullptr) pool.release(a[i], bytes(i));
  t.barrier();

  // The copies' buffers absent, nothing reads them: every destination byte arrives.
  a = allocate_filled(src, own, pool);
  a.resize(sl.buffers.size(), nullptr);
  b.clear();
  run_transition(plan, sl, a, dl, b, lo.elem_bytes, t, pool, opt);
  std::string first;
  CASE_REQUIRE(verify_state(dst, dl, b, &first) == 0, first);
  for (auto* p : a) CASE_REQUIRE(p == nullptr);
  release_all(dst, dl, b, pool);
  CASE_REQUIRE(pool.live_bytes() == 0, pool.live_bytes());
  t.barrier();
}

}  // namespace dynatrain::exec::cases
