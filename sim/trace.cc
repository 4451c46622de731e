#include "sim/trace.h"

#include <algorithm>

#include "comm/inproc/inproc_transport.h"
#include "common/error.h"
#include "exec/pool_allocator.h"
#include "exec/wave_agreement.h"

namespace dynatrain::sim {

namespace {

// An allocator that is never asked for memory (dry_only) but answers what the engine asks
// before its dry run the way the chosen allocator does.
class DryAllocator final : public exec::StateAllocator {
 public:
  explicit DryAllocator(bool pool) : pool_(pool) {}
  std::byte* allocate(std::size_t) override { throw InvariantError("a dry run asked for memory"); }
  void release(std::byte*, std::size_t) override { throw InvariantError("a dry run released memory"); }
  std::size_t pagewise_min_bytes() const override { return pool_ ? exec::PoolAllocator::kMappedBytes : SIZE_MAX; }
  bool can_adopt() const override { return pool_; }
  bool can_move_pages() const override { return pool_; }  // remapped keeps copy no byte

 private:
  bool pool_;
};

}  // namespace

namespace {

// Every process's trace of `plans` (one per process, in process order) between the given layouts.
std::vector<exec::ScheduleTrace> trace_plans(const std::vector<plan::RankPlan>& plans,
                                             const std::vector<vps::RankLayout>& src,
                                             const std::vector<vps::RankLayout>& dst,
                                             const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                             const exec::TransitionOptions& options, bool pool) {
  const int world = static_cast<int>(plans.size());
  std::vector<exec::ScheduleTrace> traces(world);
  exec::SharedWaveAgreement waves;  // one agreement for all: its stats held once, each cut made once
  // The processes sit on nodes as the topology says (Transport::node_of), so the engine picks
  // its link classes (TransitionOptions::overlap_links) as it would across those hosts.
  comm::InprocOptions nodes;
  nodes.ranks_per_node = options.topology.gpus_per_node;
  comm::run_ranks(
      world,
      [&](comm::Transport& t) {
        const int me = t.rank();
        exec::TransitionOptions opt = options;
        opt.dry_only = true;
        opt.trace = &traces[me];
        opt.shared_waves = &waves;
        traces[me].rank = me;
        traces[me].world = world;
        DryAllocator alloc(pool);
        std::vector<std::byte*> s(src[me].buffers.size(), nullptr), d;
        exec::run_transition(plans[me], src[me], s, dst[me], d, elem_bytes, t, alloc, opt);
      },
      nodes);
  return traces;
}

// Every process's source and destination layout, in process order.
struct RankLayouts {
  std::vector<vps::RankLayout> src, dst;
};
RankLayouts rank_layouts(const plan::Planner& planner) {
  const int world = planner.world_size();
  RankLayouts l{std::vector<vps::RankLayout>(world), std::vector<vps::RankLayout>(world)};
  for (int p = 0; p < world; ++p) {
    l.src[p] = planner.src_rank_layout(p);
    l.dst[p] = planner.dst_rank_layout(p);
  }
  return l;
}

}  // namespace

std::vector<exec::ScheduleTrace> trace_switch(const plan::Planner& planner,
                                              const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                              const exec::TransitionOptions& options, bool pool) {
  // Plans and layouts first, on this thread (the planner's caches are not shared across threads).
  const std::vector<plan::RankPlan> plans = planner.plan_all();
  const RankLayouts layouts = rank_layouts(planner);
  return trace_plans(plans, layouts.src, layouts.dst, elem_bytes, options, pool);
}

std::vector<exec::ScheduleTrace> trace_fanout(const plan::Planner& planner, const plan::FanoutPlan& fanout,
                                              const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                              const exec::TransitionOptions& options, bool pool) {
  const int world = planner.world_size();
  const RankLayouts layouts = rank_layouts(planner);
  std::vector<exec::ScheduleTrace> all(world);
  for (int p = 0; p < world; ++p) all[p].rank = p, all[p].world = world;
  int wave_base = 0;
  for (std::size_t s = 0; s < fanout.stages.size(); ++s) {
    std::vector<plan::RankPlan> plans = fanout.stages[s];
    DT_CHECK(static_cast<int>(plans.size()) <= world, "fan-out stage ", s, " has ", plans.size(), " plans for ", world,
             " processes");
    for (int p = static_cast<int>(plans.size()); p < world; ++p) plans.push_back(plan::RankPlan{p, {}, {}, {}});
    exec::TransitionOptions opt = options;
    opt.in_place = s > 0;  // later stages: the destination layout to itself, buffers stay put
    const auto stage = trace_plans(plans, s == 0 ? layouts.src : layouts.dst, layouts.dst, elem_bytes, opt, pool);
    int waves = 0;
    for (int p = 0; p < world; ++p)
      for (exec::ScheduleEvent e : stage[p].events) {
        waves = std::max(waves, e.wave + 1);
        e.wave += wave_base;
        all[p].events.push_back(e);
      }
    wave_base += waves;
  }
  return all;
}

std::vector<exec::ScheduleTrace> plain_exchange_traces(const std::vector<exec::ScheduleTrace>& switch_traces,
                                                       std::uint64_t chunk) {
  DT_CHECK(chunk > 0, "plain exchange: chunk of 0 bytes");
  const int world = static_cast<int>(switch_traces.size());
  std::vector<std::vector<std::uint64_t>> sends(world, std::vector<std::uint64_t>(world, 0));  // [from][to]
  for (const auto& t : switch_traces)
    for (const auto& e : t.events)
      if (e.kind == exec::ScheduleEvent::Kind::kPost && e.send_bytes > 0) sends[t.rank][e.peer] += e.send_bytes;
  int steps = 1;
  while (steps < world) steps <<= 1;
  struct Round {
    int peer;
    std::uint32_t index;       // chunk of the pair
    std::uint64_t send, recv;  // bytes each way
  };
  std::vector<exec::ScheduleTrace> out(world);
  for (int me = 0; me < world; ++me) {
    std::vector<Round> rounds;
    for (int s = 1; s < steps; ++s) {
      const int q = me ^ s;
      if (q >= world) continue;
      std::uint64_t out_left = sends[me][q], in_left = sends[q][me];
      for (std::uint32_t i = 0; out_left > 0 || in_left > 0; ++i) {
        const std::uint64_t a = std::min(out_left, chunk), b = std::min(in_left, chunk);
        rounds.push_back({q, i, a, b});
        out_left -= a, in_left -= b;
      }
    }
    exec::ScheduleTrace& t = out[me];
    t.rank = me, t.world = world;
    auto post = [&](const Round& r) { t.post(0, r.peer, r.index, r.send, false, r.recv); };
    if (!rounds.empty()) post(rounds[0]);
    for (std::size_t k = 0; k < rounds.size(); ++k) {
      if (k + 1 < rounds.size()) post(rounds[k + 1]);
      t.wait(0, rounds[k].peer, rounds[k].index, 0);
    }
  }
  return out;
}

}  // namespace dynatrain::sim
