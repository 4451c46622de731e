#include "testing/seed.h"
#include "tests/exec/exec_cases.h"

#include <algorithm>
#include <random>
#include <sstream>

#include "common/error.h"
#include "testing/fill.h"
#include "exec/pool_allocator.h"
#include "testing/state_oracle.h"
#include "plan/planner.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

#define CASE_REQUIRE(cond, ...)                                                                 \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::dynatrain::exec::cases::CaseFailure(::dynatrain::detail::concat(                \
          __FILE__, ":", __LINE__, ": rank ", t.rank(), "/", t.size(), ": ", c.name(), ": ", \
          #cond, " " __VA_OPT__(, ) __VA_ARGS__));                                              \
  } while (0)

namespace dynatrain::exec::cases {
using namespace dynatrain::testing;

std::string TransitionCase::name() const {
  std::string s = kind + "_" + model + "_" + from + "_to_" + to;
  if (order == WaveOrder::kAscending) s += "_asc";
  if (order == WaveOrder::kDescending) s += "_desc";
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
  return (a.tp != b.tp) + (a.pp != b.pp) + (a.dp != b.dp) + (a.cp != b.cp) + (a.ep != b.ep) +
         (a.etp != b.etp) + (a.zero != b.zero);
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
  }
  return out;
}

TransitionStats run_case(const TransitionCase& c, comm::Transport& t) {
  CASE_REQUIRE(t.size() >= c.world, "case needs ", c.world, " ranks");
  const vps::ModelSpec model = vps::model_from_name(c.model);
  vps::LayoutOptions lo;
  lo.bucket_elems = c.bucket_elems;
  const vps::Layout src(model, vps::ParallelConfig::parse(c.from), lo);
  const vps::Layout dst(model, vps::ParallelConfig::parse(c.to), lo);
  const int me = t.rank();
  const plan::Planner planner(src, dst);
  const plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  const vps::RankLayout sl = src.rank_layout(me), dl = dst.rank_layout(me);

  PoolAllocator pool;
  std::vector<std::byte*> a = allocate_filled(src, sl, pool), b;
  TransitionOptions opt;
  opt.mem_budget = c.budget;
  opt.order = c.order;
  const TransitionStats s = run_transition(plan, sl, a, dl, b, lo.elem_bytes, t, pool, opt);

  // Content: every destination element.
  std::string first;
  CASE_REQUIRE(verify_state(dst, dl, b, &first) == 0, first);
  // Sources all released, destination all present.
  for (auto* p : a) CASE_REQUIRE(p == nullptr);
  CASE_REQUIRE(b.size() == dl.buffers.size());
  // Bytes: what the plan says.
  auto bytes_of = [&](const plan::Piece& p) {
    return static_cast<std::uint64_t>(p.box.numel()) * static_cast<std::uint64_t>(lo.elem_bytes[static_cast<int>(p.kind)]);
  };
  std::uint64_t want_sent = 0, want_recv = 0, want_kept = 0;
  for (const auto& p : plan.keep) want_kept += bytes_of(p);
  for (const auto& [q, v] : plan.send) for (const auto& p : v) want_sent += bytes_of(p);
  for (const auto& [q, v] : plan.recv) for (const auto& p : v) want_recv += bytes_of(p);
  CASE_REQUIRE(s.bytes_sent == want_sent, s.bytes_sent, " vs ", want_sent);
  CASE_REQUIRE(s.bytes_received == want_recv, s.bytes_received, " vs ", want_recv);
  CASE_REQUIRE(s.bytes_kept == want_kept, s.bytes_kept, " vs ", want_kept);
  CASE_REQUIRE(s.messages >= plan.send.size(), s.messages, " messages for ", plan.send.size(), " peers");
  // Memory: staging within budget, prediction exact, peak within max(src, dst) + budget.
  CASE_REQUIRE(s.staging_bytes <= c.budget / 2, s.staging_bytes);
  CASE_REQUIRE(s.src_bytes == static_cast<std::uint64_t>(sl.bytes(lo)));
  CASE_REQUIRE(s.dst_bytes == static_cast<std::uint64_t>(dl.bytes(lo)));
  CASE_REQUIRE(s.peak_bytes == s.predicted_peak_bytes, s.peak_bytes, " vs predicted ", s.predicted_peak_bytes);
  CASE_REQUIRE(s.peak_bytes <= std::max(s.src_bytes, s.dst_bytes) + c.budget, "peak ", s.peak_bytes,
               " src ", s.src_bytes, " dst ", s.dst_bytes, " budget ", c.budget);
  // The pool agrees with the engine up to its 64-byte rounding.
  const std::size_t slack = PoolAllocator::kAlign * (sl.buffers.size() + dl.buffers.size() + 2);
  CASE_REQUIRE(pool.peak_live() <= s.peak_bytes + slack, pool.peak_live(), " vs ", s.peak_bytes);
  CASE_REQUIRE(pool.live_bytes() >= s.dst_bytes && pool.live_bytes() <= s.dst_bytes + slack);
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
  const std::array<int, vps::kNumStateKinds> eb = vps::LayoutOptions{}.elem_bytes;
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

}  // namespace dynatrain::exec::cases
