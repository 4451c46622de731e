// A layout switch on this rank: prepare (runs on the EDM's thread while steps go on: placement,
// this rank's layouts and plan, the pool's prefault) and commit at a step boundary (progress
// carried from rank 0, the transfer by the engine or the gather path, new arenas and views).
// Invariants: the current layout, arenas and views do not change until the commit; the commit
// moves only kMovedKinds (gradients are zero at a step boundary and are made anew, unzeroed,
// with grads_stale set); every state block comes from and returns to the pool, so the commit's
// peak stays within max(source, destination) + the engine's budget.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/clock.h"
#include "common/error.h"
#include "edm/new_rank.h"
#include "edm/vacate.h"
#include "exec/engine.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

using vps::StateKind;

namespace {

// Staging and destination blocks from the pool; source blocks, taken from the old arenas, go
// back to the pool as the engine drains them. Page-wise memory is the pool's (exec/engine.h):
// large sources are given back page by page, large destinations built in pieces, a source
// buffer identical to a destination one is adopted as it is (zero-copy keep), and kept runs
// at page-congruent offsets are moved by remapping pages. Destinations the engine made by
// reserve() or adoption reach the new arenas from its output pointers (adopt_outputs).
class Allocator final : public exec::StateAllocator {
 public:
  Allocator(exec::PoolAllocator& pool, Arenas& next) : pool_(pool), next_(next) {}
  std::byte* allocate(std::size_t bytes) override { return pool_.allocate(bytes); }
  std::byte* allocate_destination(const vps::LocalBuffer& b, std::size_t bytes) override {
    DT_CHECK_EQ(bytes, next_.block_bytes(b));
    std::byte* p = pool_.allocate(bytes);
    next_.set(b, p);
    return p;
  }
  void release(std::byte* data, std::size_t bytes) override { pool_.release(data, bytes); }
  std::size_t pagewise_min_bytes() const override { return pool_.pagewise_min_bytes(); }
  bool can_adopt() const override { return true; }
  bool can_move_pages() const override { return true; }
  bool huge_pages() const override { return pool_.huge_pages(); }
  void move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                  std::size_t bytes) override {
    pool_.move_pages(from, from_offset, to, to_offset, bytes);
  }
  std::byte* reserve(std::size_t bytes) override { return pool_.reserve(bytes); }
  void commit(std::byte* base, std::size_t offset, std::size_t bytes) override { pool_.commit(base, offset, bytes); }
  void decommit(std::byte* base, std::size_t offset, std::size_t bytes) override {
    pool_.decommit(base, offset, bytes);
  }
  // After the transition: destination buffers not made by allocate_destination() join the
  // new arenas (their size is the buffer's, as release() will be told).
  void adopt_outputs(const vps::RankLayout& dst, const std::vector<std::byte*>& ptrs) {
    for (std::size_t i = 0; i < dst.buffers.size(); ++i)
      if (ptrs[i] != nullptr && next_.bytes(dst.buffers[i]) == nullptr) next_.set(dst.buffers[i], ptrs[i]);
  }

 private:
  exec::PoolAllocator& pool_;
  Arenas& next_;
};

// The part of a switch's report known before anything moves.
SwitchStats switch_header(const vps::ParallelConfig& from, const edm::Prepared& p, SwitchMethod method,
                          int lookahead_used) {
  SwitchStats st;
  st.from = from.str();
  st.to = p.config.str();
  st.method = method;
  st.world_before = p.world_before;
  st.world_after = p.world_before;
  st.lookahead = lookahead_used;
  return st;
}

}  // namespace

exec::TransitionOptions engine_options(const TrainerOptions& opt) {
  exec::TransitionOptions to;
  to.topology.gpus_per_node = opt.gpus_per_node;
  to.keep_path = opt.keep_path;
  return to;
}

// ---- prepare (on the EDM's thread, while steps run) ----
void Trainer::Impl::prepare(vps::ParallelConfig next, std::string payload, std::vector<int> vacate, bool keep) {
  check_supported(opt, next);
  if (const std::string why = edm::vacate_problem(vacate, world().size()); !why.empty()) DT_INPUT_ERROR(why);
  if (opt.switch_method != SwitchMethod::kEngine && !vacate.empty())
    DT_INPUT_ERROR("vacating processes needs the engine switch method");
  lookahead_used = lookahead;
  const vps::ParallelConfig current = cfg();
  edm->prepare(
      current, next,
      [this, current, next](const edm::Prepared& p) {
        if (p.refused.empty()) plan_switch(current, next, plan::Placement(p.process_of_rank));
      },
      std::move(payload), place(current, next, vacate), vacate, keep);
}

// The EDM's placement callback (runs on its thread on every rank, same answer everywhere).
edm::DeviceManager::Place Trainer::Impl::place(const vps::ParallelConfig& current, const vps::ParallelConfig& next,
                                               const std::vector<int>& vacate) const {
  if (!vacate.empty()) return edm::vacate_place(next.world_size(), vacate);
  if (opt.placement != TrainerOptions::Placement::kAuto || opt.switch_method != SwitchMethod::kEngine) return {};
  return [this, current, next](int processes) -> std::vector<int> {
    auto src = make_layout(current, kMovedKinds);
    auto dst = make_layout(next, kMovedKinds);
    if (processes != std::max(current.world_size(), next.world_size())) return {};
    plan::Topology topo;
    topo.gpus_per_node = opt.gpus_per_node;
    // Rank 0 stays on process 0 (the job's leader moves only when a request vacates it); the
    // other ranks are placed around it.
    const plan::Placement chosen = plan::auto_placement(*src, *dst, topo, {}, {}, {}, /*rank0_on_process0=*/true);
    DT_CHECK(chosen.process_of(0) == 0, "auto placement moved rank 0 to process ", chosen.process_of(0));
    return chosen.processes_of(next.world_size());
  };
}

// This rank's layouts and plan for the switch (no communication, no torch: safe on the EDM's
// thread while the caller trains; the current layout does not change until the commit).
void Trainer::Impl::plan_switch(const vps::ParallelConfig& current, const vps::ParallelConfig& next,
                                plan::Placement placement) {
  const auto t0 = Clock::now();
  // This process's rank in the transition world: in the current world, a process keeps its
  // index in the world a grow merges; the new layout's ranks sit where `placement` says.
  const int r = world().rank();
  auto ps = new_pending(next, placement, r);
  if (opt.switch_method == SwitchMethod::kEngine) {
    auto src = make_layout(current, kMovedKinds);
    auto dst = make_layout(next, kMovedKinds);
    plan::Topology topo;
    topo.gpus_per_node = opt.gpus_per_node;
    plan::Planner planner(*src, *dst, topo, {{}, placement, {}});
    if (r < planner.world_size()) {
      take_plan(*ps, planner, r);
    } else {
      ps->src_rl = src->rank_layout(r);
      ps->dst_rl = dst->rank_layout(r);
    }
  }
  ps->prefaulted = prefault_for(*ps);
  ps->plan_s = seconds_since(t0);
  pending = std::move(ps);
}

// A switch into `next` with `placement` as process `r` of the transition world will see it, with
// no plan yet (plan.rank only).
std::unique_ptr<PendingSwitch> Trainer::Impl::new_pending(const vps::ParallelConfig& next, plan::Placement placement,
                                                          int r) const {
  auto ps = std::make_unique<PendingSwitch>();
  ps->next = next;
  ps->placement = std::move(placement);
  ps->new_rank = edm::new_rank_of(ps->placement, r, next.world_size());
  ps->dst_full = make_layout(next);
  // A process without a new rank holds nothing (a rank index beyond the layout).
  ps->dst_full_rl = ps->dst_full->rank_layout(edm::held_rank_index(ps->new_rank, next.world_size(), r));
  ps->plan.rank = r;
  return ps;
}

// Process r's part of `planner`'s plan (r within the planner's processes).
void Trainer::Impl::take_plan(PendingSwitch& ps, const plan::Planner& planner, int r) {
  ps.plan = planner.plan_rank(r);
  ps.src_rl = planner.src_rank_layout(r);
  ps.dst_rl = planner.dst_rank_layout(r);
  ps.own_sources = ps.src_rl.buffers.size();  // (a recovery from copies counts its own: plan_recovery)
}

std::size_t Trainer::Impl::memory_beyond_source(std::size_t src, std::size_t dst, std::uint64_t moved) {
  const std::size_t staging = std::min<std::uint64_t>(exec::TransitionOptions{}.mem_budget, moved);
  return (dst > src ? dst - src : 0) + staging;
}

// The memory a commit of `ps` needs beyond what the source gives back (memory_beyond_source),
// made resident now so that the commit never faults fresh pages. Returns the bytes made resident.
std::size_t Trainer::Impl::prefault_for(const PendingSwitch& ps) {
  std::uint64_t moved = 0;
  for (const auto* side : {&ps.plan.send, &ps.plan.recv})
    for (const auto& [peer, pieces] : *side)
      for (const auto& piece : pieces)
        moved += static_cast<std::uint64_t>(piece.box.numel()) * elem()[static_cast<int>(piece.kind)];
  const std::size_t src = state_bytes(rank_layout, elem()), dst = state_bytes(ps.dst_full_rl, elem());
  return pool.prefault(memory_beyond_source(src, dst, moved));
}

// Rank 0's choice, agreed in the commit: enough steps for the last prepare, with a 50 %
// margin, to finish behind training, plus one.
int Trainer::Impl::choose_lookahead(double prepare_s) const {
  if (opt.lookahead > 0) return opt.lookahead;
  const double step_s = std::max(last_step_s, 1e-4);
  return static_cast<int>(std::clamp(std::ceil(1.5 * prepare_s / step_s) + 1.0, 1.0, 1000.0));
}

// ---- commit (at a step boundary) ----
SwitchStats Trainer::Impl::commit(std::string leader_state) {
  edm::Prepared& p = edm->wait_prepared();
  SwitchStats st = switch_header(cfg(), p, opt.switch_method, lookahead_used);
  if (!p.refused.empty()) {  // decided by rank 0 for everybody: nobody moves anything
    st.refused = p.refused;
    edm->discard();
    pending.reset();
    return st;
  }
  DT_CHECK(pending != nullptr, "commit() without a prepared plan");
  st.note = p.note;
  st.world_after = p.world_after;
  comm::Transport& tw = edm->transition_world();
  const int current_world = cfg().world_size();
  if (tw.rank() >= current_world)
    edm::DeviceManager::wait_for_root(tw, edm::Wake::kCommit);
  else
    edm::DeviceManager::wake_from(tw, current_world, edm::Wake::kCommit);
  const auto t0 = Clock::now();
  const CpuUsage cpu0 = CpuUsage::now();
  CommitFigures mine;
  carry_progress(tw, p, leader_state, st);
  mine.phases.carry = seconds_since(t0);
  model = StageModel{};  // no module may hold the old arenas past this point
  move_state(tw, p, mine, st);
  mine.total_s = seconds_since(t0);
  mine.cpu = CpuUsage::now().since(cpu0);
  // The commit's start on the machine's monotonic clock (one clock for every process of a node).
  mine.start = std::chrono::duration<double>(t0.time_since_epoch()).count();
  report_commit(tw, p, mine, st);
  pending.reset();
  edm->adopt();
  left = edm->left();
  return st;
}

// Step counter, data cursor (the data order), the next look-ahead, the world's size before
// the switch (processes started by it count the merged world) and this switch's look-ahead
// (processes started by it did not prepare it) from rank 0, which every layout holds. The
// job's leader (world rank 0) moves when the placement gives rank 0 to another process: the
// caller's leader state goes along, to every rank of the transition world.
void Trainer::Impl::carry_progress(comm::Transport& tw, const edm::Prepared& p, std::string& leader_state,
                                   SwitchStats& st) {
  std::uint64_t carry[6] = {static_cast<std::uint64_t>(step),
                            cursor.seed,
                            cursor.position,
                            static_cast<std::uint64_t>(choose_lookahead(p.seconds)),
                            static_cast<std::uint64_t>(p.world_before),
                            static_cast<std::uint64_t>(lookahead_used)};
  tw.broadcast(carry, sizeof(carry), 0);
  step = static_cast<std::int64_t>(carry[0]);
  cursor.seed = carry[1];
  cursor.position = carry[2];
  lookahead = static_cast<int>(carry[3]);
  st.world_before = static_cast<int>(carry[4]);
  st.lookahead = static_cast<int>(carry[5]);
  if (!p.process_of_rank.empty() && p.process_of_rank[0] != 0) {
    comm::broadcast_string(tw, leader_state);
    st.leader_state = std::move(leader_state);
    st.leader_moved = true;
  }
}

// The transfer and the rebuild: every figure of them into `mine` (memory, bytes, phases).
// Memory: everything here comes from the pool. Gradients are zero at a step boundary and do
// not move: the old ones go back first, the new ones are made last.
void Trainer::Impl::move_state(comm::Transport& tw, const edm::Prepared& p, CommitFigures& mine, SwitchStats& st) {
  const std::size_t src_bytes = state_bytes(rank_layout, elem()), dst_bytes = state_bytes(pending->dst_full_rl, elem());
  moving = true;  // until adopt(): the state is in neither layout whole (Trainer::state_intact)
  if (pending->own_sources == pending->src_rl.buffers.size()) release_copies();  // not sources: of the old layout
  pool.reset_peaks();
  const std::size_t fresh_before = pool.fresh_bytes();
  for (const auto& b : rank_layout.buffers)
    if (b.kind == StateKind::kGrad) arenas.release(b);
  Arenas next_arenas(pool, elem());
  SwitchStats::Phases& ph = mine.phases;
  const TransferResult tr =
      opt.switch_method == SwitchMethod::kEngine ? run_engine(tw, next_arenas, ph) : run_gather(tw, next_arenas);
  const auto tr0 = Clock::now();
  arenas = Arenas{};  // whatever the engine did not take (nothing, for moved kinds)
  ph.free = seconds_since(tr0);
  auto tg0 = Clock::now();
  take_gradients(next_arenas);
  ph.grads = seconds_since(tg0);
  tg0 = Clock::now();
  st.placement = pending->placement.str();
  mine.plan_s = pending->plan_s;
  mine.prefaulted = pending->prefaulted;
  adopt(std::move(pending->dst_full), std::move(next_arenas), p.comms, &pending->dst_full_rl, pending->new_rank);
  moving = false;
  ph.views = seconds_since(tg0);
  mine.peak = pool.peak_live();
  mine.bound = std::max(src_bytes, dst_bytes) + tr.budget;
  mine.fresh = pool.fresh_bytes() - fresh_before;
  if (opt.fault_drop_moments_on_switch)
    for (StateKind k : {StateKind::kExpAvg, StateKind::kExpAvgSq}) zero_kind(k);
  mine.rebuild_s = seconds_since(tr0);
  mine.transfer_s = tr.transfer_s;
  mine.sent = tr.sent;
  mine.received = tr.received;
  mine.kept = tr.kept;
}

// Runs the prepared plan on the transition world: every rank of it takes part (ranks beyond
// the planner's world with an empty plan), so the commit creates no communicator.
TransferResult Trainer::Impl::run_engine(comm::Transport& tw, Arenas& next_arenas, SwitchStats::Phases& ph) {
  const PendingSwitch& ps = *pending;
  TransferResult out;
  const auto tt0 = Clock::now();
  std::vector<std::byte*> src_ptrs, dst_ptrs(ps.dst_rl.buffers.size(), nullptr);
  for (std::size_t i = 0; i < ps.own_sources; ++i) src_ptrs.push_back(arenas.take(ps.src_rl.buffers[i]));
  for (HeldCopy& c : copies.held)  // a recovery's copies, after this rank's own buffers (plan_recovery)
    src_ptrs.insert(src_ptrs.end(), c.buffers.begin(), c.buffers.end());
  DT_CHECK_EQ(src_ptrs.size(), ps.src_rl.buffers.size());
  copies = Copies{};  // the engine gives every source back to the pool
  Allocator alloc(pool, next_arenas);
  exec::TransitionOptions to = engine_options(opt);
  to.progress = &switch_progress;
  const vps::ElemBytes eb = elem();
  exec::TransitionStats ts = exec::run_transition(ps.plan, ps.src_rl, src_ptrs, ps.dst_rl, dst_ptrs, eb, tw, alloc, to);
  out.sent = ts.bytes_sent;
  out.received = ts.bytes_received;
  out.transfer_s = seconds_since(tt0);
  ph.engine_pack = ts.pack_seconds;
  ph.engine_unpack = ts.unpack_seconds;
  ph.engine_keep = ts.keep_seconds;
  ph.engine_wait = ts.wait_seconds;
  ph.engine_alloc = ts.alloc_seconds;
  ph.engine_agree = ts.agree_seconds;
  ph.engine_system = ts.system_seconds;
  ph.engine_faults = static_cast<double>(ts.page_faults);
  alloc.adopt_outputs(ps.dst_rl, dst_ptrs);
  out.kept = {ts.bytes_kept, ts.kept_remapped_bytes, ts.kept_zero_copy_bytes};
  pending->chunk_bytes = ts.chunk_bytes;
  for (std::size_t i = 0; i < ps.dst_rl.buffers.size(); ++i)
    DT_CHECK(dst_ptrs[i] != nullptr || ps.dst_rl.buffers[i].numel == 0, "engine left destination buffer ", i, " empty");
  out.budget = to.mem_budget;
  return out;
}

// The reference path: every moved kind gathered to rank 0 in VPS coordinates, broadcast, and
// scattered into the new arenas.
TransferResult Trainer::Impl::run_gather(comm::Transport& tw, Arenas& next_arenas) {
  TransferResult out;
  const auto tt0 = Clock::now();
  next_arenas.fill_missing(pending->dst_full_rl);
  for (StateKind kind : kMovedKinds) {
    Gathered g = gather_vps(*layout, kind, arenas, tw);
    std::vector<std::vector<float>> full(layout->tensors().size());
    for (const auto& t : layout->tensors()) {
      full[t.id] = tw.rank() == 0 ? std::move(g.tensors[t.id]) : std::vector<float>(t.numel());
      tw.broadcast(full[t.id].data(), full[t.id].size() * sizeof(float), 0);
      switch_progress.fetch_add(full[t.id].size() * sizeof(float), std::memory_order_relaxed);
    }
    scatter_vps(*pending->dst_full, pending->dst_full_rl, kind, full, next_arenas);
  }
  out.transfer_s = seconds_since(tt0);
  return out;
}

// The new layout's gradient buffers, from the pool and not zeroed: every step starts by
// zeroing them, and the readers between steps (gather, arenas) zero them first
// (grads_stale), so the pause does not pay for a second memset of every gradient.
void Trainer::Impl::take_gradients(Arenas& next_arenas) {
  for (const auto& b : pending->dst_full_rl.buffers)
    if (b.kind == StateKind::kGrad && b.numel > 0 && next_arenas.bytes(b) == nullptr)
      next_arenas.set(b, pool.allocate(next_arenas.block_bytes(b)));
  next_arenas.fill_missing(pending->dst_full_rl);  // any other buffer the engine did not make, zero
  grads_stale = true;
}

void Trainer::Impl::zero_stale_gradients() {
  if (grads_stale && rc.active) zero_kind(StateKind::kGrad);
  grads_stale = false;
}

}  // namespace dynatrain::train
