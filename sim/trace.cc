#include "sim/trace.h"

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
  std::size_t pagewise_min_bytes() const override {
    return pool_ ? exec::PoolAllocator::kMappedBytes : SIZE_MAX;
  }
  bool can_adopt() const override { return pool_; }
  bool can_move_pages() const override { return pool_; }  // remapped keeps copy no byte

 private:
  bool pool_;
};

}  // namespace

std::vector<exec::ScheduleTrace> trace_switch(const plan::Planner& planner,
                                              const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                              const exec::TransitionOptions& options, bool pool) {
  const int world = planner.world_size();
  // Plans and layouts first, on this thread (the planner's caches are not shared across threads).
  const std::vector<plan::RankPlan> plans = planner.plan_all();
  std::vector<vps::RankLayout> src(world), dst(world);
  for (int p = 0; p < world; ++p) {
    src[p] = planner.src_rank_layout(p);
    dst[p] = planner.dst_rank_layout(p);
  }
  std::vector<exec::ScheduleTrace> traces(world);
  exec::SharedWaveAgreement waves;  // one agreement for all: its stats held once, each cut made once
  // The processes sit on nodes as the topology says (Transport::node_of), so the engine picks
  // its link classes (TransitionOptions::overlap_links) as it would across those hosts.
  comm::InprocOptions nodes;
  nodes.ranks_per_node = options.topology.gpus_per_node;
  comm::run_ranks(world, [&](comm::Transport& t) {
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
  }, nodes);
  return traces;
}

}  // namespace dynatrain::sim
