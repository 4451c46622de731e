// The state a Python training loop switches: this rank's buffers of every state kind in one
// layout, owned here and moved by the engine (exec/) on switch_to(). No Python and no torch in
// this file: module.cc binds it, dynatrain/__init__.py wraps the buffers in torch tensors.
//
// Invariants:
//  * buffer(i) is the memory of rank_layout().buffers[i] (nullptr for zero elements), taken
//    from the manager's PoolAllocator, so a switch builds the new state in the memory the old
//    one gave back. Pointers (and any tensor viewing them) are invalid after switch_to(),
//    except that a buffer pinned through pin() keeps its memory (unused by the new layout)
//    until its pin goes (python/keep_alive.h).
//  * Every rank of the job calls the constructor and switch_to() with equal arguments
//    (collective); ranks at or above a config's world size hold nothing in it.
//  * The layout's rank r is world() rank r. A switch that changes the job's processes
//    (python/elastic.h) replaces the world with one that keeps this invariant: the state moves
//    over a transition world holding every process of both layouts, then the new world (the
//    grown, shrunk or reordered one) becomes world(). On a process that left, world() throws.
//  * Padding elements (bucket padding, vocab padding rows) are zero after construction and after
//    every switch (the engine zeroes them), unless the caller writes them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "exec/engine.h"
#include "exec/pool_allocator.h"
#include "python/keep_alive.h"
#include "plan/plan.h"
#include "vps/layout.h"
#include "common/clock.h"

namespace dynatrain::python {

class Elastic;  // python/elastic.h: the job's process-count changes

// The layout of the manager's model in a config: a built-in or HF model, or a user tensor list
// (the two Layout constructors). Throws InputError for a config the model cannot take.
using LayoutFactory = std::function<vps::Layout(const vps::ParallelConfig&)>;
LayoutFactory model_layouts(vps::ModelSpec model, vps::LayoutOptions options);
LayoutFactory tensor_list_layouts(std::vector<vps::TensorSpec> tensors, vps::ModelSpec model,
                                  vps::LayoutOptions options);

// One switch as the user sees it: max over ranks of each time, sums and maxima of bytes.
struct SwitchStats {
  double pause_seconds = 0;      // whole switch_to() on the slowest rank (plan + engine)
  double plan_seconds = 0;       // this rank's plan, slowest rank
  double engine_seconds = 0;     // run_transition, slowest rank
  std::uint64_t bytes_sent = 0;  // summed over ranks
  std::uint64_t max_rank_bytes_received = 0;
  std::uint64_t max_rank_bytes_zeroed = 0;  // zero_grads: the grads a rank zeroes, not moved
  std::uint64_t bytes_kept = 0;             // summed over ranks
  std::uint64_t messages = 0;               // summed over ranks
  std::uint64_t peak_bytes = 0;             // max over ranks, engine-accounted
  std::uint64_t max_src_bytes = 0, max_dst_bytes = 0;
  // Where the engine's time went, each the slowest rank's (exec::TransitionStats): agreement
  // (checks, keep planning, the collective wave agreement), dry runs, asking the allocator,
  // pack, unpack, keeps, waiting on the link; the system time and page faults of the switch.
  double agree_seconds = 0, dry_seconds = 0, alloc_seconds = 0, pack_seconds = 0, unpack_seconds = 0;
  double keep_seconds = 0, wait_seconds = 0, system_seconds = 0;
  std::uint64_t page_faults = 0;
  std::uint64_t kept_zero_copy_bytes = 0;   // summed over ranks: keeps handed over, not copied
  std::uint64_t kept_remapped_bytes = 0;    // summed over ranks: keeps whose pages moved, not copied
  std::uint64_t committed_ahead_bytes = 0;  // summed over ranks: receive memory committed before the exchange
  std::string keep_path;                    // exec::TransitionStats::keep_path (this rank's)
  bool plan_cached = false;                 // the plan came from the manager's cache (no planner run)
};

// Where a local tensor's piece lives for one state kind: `length` elements at `offset` in buffer
// `buffer`. For unsharded kinds the whole local tensor (shape `local_shape`, padding included,
// start 0); for ZeRO-sharded kinds the part of the flattened local tensor in this rank's shard,
// elements [start, start + length) of it (length may be 0).
struct TensorView {
  std::uint32_t tensor = 0;
  vps::StateKind kind = vps::StateKind::kParam;
  std::uint32_t buffer = 0;
  std::int64_t offset = 0, length = 0, start = 0;
  bool sharded = false;
  std::vector<std::int64_t> local_shape;
};

// One bucket of this rank (dense buckets first, then expert ones): its ZeRO shard is elements
// [shard_lo, shard_hi) of the padded bucket of `bucket_numel` elements, taken over the dp x cp
// group (dense) or the edp group (expert). buffers[k] is the buffer id of kind k, -1 if absent.
struct BucketInfo {
  bool expert = false;
  std::int32_t bucket = 0;
  std::int64_t bucket_numel = 0, shard_lo = 0, shard_hi = 0;
  std::vector<std::int64_t> buffers;  // indexed by StateKind
};

class Manager {
 public:
  // Collective. `config`'s world size must not exceed world->size() (InputError otherwise).
  // Allocates and zeroes this rank's buffers. With `prefault` (the default) it then touches
  // min(options.mem_budget, this rank's state bytes) of spare pages in the pool: what a switch
  // that does not grow this rank's state can take beyond its source at most (the engine's peak
  // <= max(source, destination) + budget), so switches build their state in warm pages, not
  // fresh ones; the pool then holds at most state + budget, within that bound.
  Manager(std::unique_ptr<comm::Transport> world, LayoutFactory layouts, const vps::ParallelConfig& config,
          exec::TransitionOptions options = {}, bool prefault = true);
  // In a process a grow started: `joined` holds the job's world, in which this process holds
  // nothing of the job's current layout `config` until python::finish_join() moves its state in.
  Manager(std::shared_ptr<Elastic> joined, LayoutFactory layouts, const vps::ParallelConfig& config,
          exec::TransitionOptions options = {});
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Collective: moves every state kind to `to`, rebinding buffer(i). An InputError (bad
  // config) is thrown on every rank before anything moves; the state is then unchanged.
  // `zeroed_kinds` (bit k = StateKind k, equal on every rank): kinds not moved but zero after
  // (exec::TransitionOptions::zeroed_kinds; grads at a step boundary); with `fill_zeroed` false
  // they are left unset instead, for a caller that zeroes them before any read.
  SwitchStats switch_to(const vps::ParallelConfig& to, std::uint32_t zeroed_kinds = 0, bool fill_zeroed = true);
  // Throws the InputError switch_to(to) would throw before moving anything; no communication.
  void validate(const vps::ParallelConfig& to) const;

  const vps::Layout& layout() const { return *layout_; }
  const vps::RankLayout& rank_layout() const { return rank_layout_; }
  std::byte* buffer(std::size_t i) const { return buffers_.at(i); }
  std::size_t buffer_bytes(std::size_t i) const;
  int rank() const { return world().rank(); }
  int size() const { return world().size(); }
  comm::Transport& world() const;  // InputError on a process that left the job
  const exec::PoolAllocator& pool() const { return pool_; }
  // Makes at least `bytes` of spare pages resident in the pool (a process about to receive a
  // state it does not hold yet: its switch then lands in warm pages). Returns the bytes touched.
  std::size_t prefault(std::size_t bytes) { return pool_.prefault(bytes); }
  // Keeps buffer(i)'s memory out of every later switch's reuse until the token is destroyed.
  std::shared_ptr<void> pin(std::size_t i) { return holder().pin(buffers_.at(i), buffer_bytes(i)); }
  const KeepAliveAllocator& keep_alive() const { return keep_alive_; }
  // The allocator every transition of this manager's buffers must use (switch_to() does), so
  // that pinned buffers stay out of its reuse.
  exec::StateAllocator& switch_allocator() { return keep_alive_; }

  std::vector<TensorView> views() const;
  std::vector<BucketInfo> buckets() const;

  // ---- for switches that change the job's processes (python/elastic.h) ----
  vps::Layout make_layout(const vps::ParallelConfig& config) const { return layouts_(config); }
  const exec::TransitionOptions& options() const { return options_; }
  Elastic* elastic() const { return elastic_.get(); }
  // Collective over the current world, once: the machinery of process-count changes over it.
  void set_elastic(std::shared_ptr<Elastic> elastic) { elastic_ = std::move(elastic); }
  // Collective over `transition` (every process of both layouts; this process's rank there
  // keeps its current layout rank): moves every state kind by `plan` (this process's part, in
  // processes of `transition`) to rank `new_rank` of `next` (-1: none) and rebinds buffer(i).
  // With `from_copies` the held copies' buffers follow this rank's own as sources (the plan's
  // ids, plan::SwitchPlacement::copies in copies() order); without, they are dropped first.
  // Times (from `started`, when the switch began: planning is the part before this call) and
  // bytes are gathered over `transition`.
  SwitchStats move_state(std::unique_ptr<vps::Layout> next, int new_rank, const plan::RankPlan& plan,
                         comm::Transport& transition, std::chrono::steady_clock::time_point started,
                         std::uint32_t zeroed_kinds = 0, bool from_copies = false, bool fill_zeroed = true);
  // The world after such a switch: its rank r holds rank r of the layout; nullptr on a process
  // that left (it holds nothing).
  void set_world(comm::Transport* world) {
    world_ = world;
    plans_.clear();  // planned for the old world's ranks
  }

  // ---- copies of other ranks' state (redundancy: dynatrain/_redundancy.py) ----
  // Copies this process keeps of other ranks' buffers in the current layout, for a recovery
  // when their processes are lost (recover_in_place). copies()[c].buffers[i] is buffer i of rank
  // copies()[c].rank, from the pool, zeroed at hold_copies(); the caller fills it. Buffers of
  // kinds in `absent_kinds[c]` (bit k = StateKind k) are not kept (nullptr): a recovery zeroes
  // them or reads them from a replica (plan::SwitchPlacement::Copy). Every switch gives the
  // copies back to the pool; only a recovery reads them.
  struct HeldCopy {
    int rank = 0;
    std::uint32_t absent_kinds = 0;
    vps::RankLayout layout;
    std::vector<std::byte*> buffers;
  };
  // Replaces the held copies; `absent_kinds` has one mask per rank.
  void hold_copies(const std::vector<int>& ranks, const std::vector<std::uint32_t>& absent_kinds);
  const std::vector<HeldCopy>& copies() const { return copies_; }
  std::size_t copy_bytes() const;
  std::size_t copy_buffer_bytes(std::size_t c, std::size_t i) const;
  std::shared_ptr<void> pin_copy(std::size_t c, std::size_t i) {
    return keep_alive_.pin(copies_.at(c).buffers.at(i), copy_buffer_bytes(c, i));
  }
  void drop_copies();

  // ---- weights-only copies (python/refit.cc) ----
  // Collective over world(), which must hold the same processes as `training`'s (any order):
  // this manager (param kind only, in its own layout) receives a copy of `training`'s current
  // weights, planned from `training`'s layout and moved by the engine; `training` is read, never
  // changed. From the first call on, this manager's buffers live in `training`'s pool (its own
  // pool is trimmed), so a process that lent its training state builds the copy in the memory
  // that state gave back; the previous copy's memory goes back to that pool first.
  // `members[q]`: the training world's rank of this world's process q (the copy's order).
  SwitchStats receive_weights(const std::shared_ptr<Manager>& training, const std::vector<int>& members);
  // Gives every buffer back to the pool that holds it (this manager's, or the training
  // manager's for a weights copy); buffer(i) is nullptr until receive_weights().
  void release_weights();

 private:
  void allocate_zeroed();
  // The allocator of this manager's buffers: its own, or a training manager's for a weights copy.
  KeepAliveAllocator& holder() { return weights_owner_ ? weights_owner_->keep_alive_ : keep_alive_; }

  std::unique_ptr<comm::Transport> first_world_;  // the constructor's (outlives elastic_, which may use it)
  std::shared_ptr<Elastic> elastic_;              // created at the first process-count change
  comm::Transport* world_ = nullptr;              // the job's world now (first_world_ or elastic_'s)
  LayoutFactory layouts_;
  exec::TransitionOptions options_;
  std::unique_ptr<vps::Layout> layout_;
  vps::RankLayout rank_layout_;
  exec::PoolAllocator pool_{exec::HugePages::kAuto, options_};  // after options_
  KeepAliveAllocator keep_alive_{pool_};  // the switches' allocator: the pool, minus pinned blocks
  std::vector<std::byte*> buffers_;
  std::vector<HeldCopy> copies_;
  std::shared_ptr<Manager> weights_owner_;  // a weights copy's: the training manager whose pool holds buffers_

  // This rank's plans of the last switches (or refits), by their source and target: while the
  // world stays, a plan depends on nothing else, so a lend / reclaim round re-runs the same pair
  // without the planner. `src` is the source rank layout a refit reads (empty for a switch).
  struct CachedPlan {
    std::string from, to;
    std::shared_ptr<const vps::Layout> next;
    plan::RankPlan plan;
    vps::RankLayout src;
  };
  static constexpr std::size_t kCachedPlans = 4;
  std::vector<CachedPlan> plans_;
  const CachedPlan* cached_plan(const std::string& from, const std::string& to) const;
  const CachedPlan& keep_plan(CachedPlan plan);
};

// One transition's statistics as the user sees them: this rank's `ts` and plan time, gathered
// over `transport` (max of times, sums and maxima of bytes); pause counted from `started`.
SwitchStats gathered_stats(comm::Transport& transport, double plan_seconds, const exec::TransitionStats& ts,
                           std::chrono::steady_clock::time_point started);

// Throws InputError when `layout`'s config needs more ranks than the job has.
void require_world(const vps::Layout& layout, int job_size);

}  // namespace dynatrain::python
