// Weights-only copies (docs/python.md, "RL phase shifts"): a Manager that holds the param kind
// alone, in an inference layout, receives the training Manager's current weights through the
// planner and the engine, over a world of the same processes in the order the copy's layout
// wants (rank r of the copy's layout is its world's rank r).
//
// Invariants:
//  * The training manager is only read: the engine is handed its param buffers as sources
//    through BorrowedSources, whose release() and decommit() leave them alone, and which never
//    lets the engine adopt or remap a source, so no byte of the training state changes.
//  * The source side of the plan is the training layout laid out with the copy's options
//    (param only, the copy's element size); its param buffers are the training manager's,
//    matched by (expert group, bucket) and checked segment by segment.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <set>
#include <vector>

#include "comm/transport.h"
#include "common/clock.h"
#include "common/error.h"
#include "exec/engine.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "python/manager.h"

namespace dynatrain::python {

namespace {

// The copy's allocator during a refit: destinations from the copy's own allocator, while the
// borrowed source buffers (the training manager's) are never released, decommitted, adopted
// or remapped.
class BorrowedSources final : public exec::StateAllocator {
 public:
  BorrowedSources(exec::StateAllocator& own, const std::vector<std::byte*>& sources)
      : own_(own), sources_(sources.begin(), sources.end()) {}
  std::byte* allocate(std::size_t bytes) override { return own_.allocate(bytes); }
  void release(std::byte* data, std::size_t bytes) override {
    if (!sources_.count(data)) own_.release(data, bytes);
  }
  std::size_t pagewise_min_bytes() const override { return SIZE_MAX; }

 private:
  exec::StateAllocator& own_;
  std::set<std::byte*> sources_;
};

bool same_segments(const vps::LocalBuffer& a, const vps::LocalBuffer& b) {
  if (a.numel != b.numel || a.segments.size() != b.segments.size()) return false;
  for (std::size_t i = 0; i < a.segments.size(); ++i)
    if (a.segments[i].tensor != b.segments[i].tensor || a.segments[i].offset != b.segments[i].offset) return false;
  return true;
}

// The training manager's buffer that holds `want` (a param buffer of the same rank laid out
// with the copy's options): nullptr for an empty one; InvariantError when none matches.
std::byte* training_buffer(const Manager& training, const vps::LocalBuffer& want) {
  for (const vps::LocalBuffer& b : training.rank_layout().buffers)
    if (b.kind == vps::StateKind::kParam && b.expert_group == want.expert_group && b.bucket == want.bucket) {
      DT_CHECK(same_segments(b, want), "param bucket ", want.bucket, " is laid out differently in the copy's options");
      return training.buffer(b.id);
    }
  DT_CHECK(want.numel == 0, "no param buffer of bucket ", want.bucket, " in the training manager");
  return nullptr;
}

// The process (of `world`) that holds each rank of the training layout.
plan::Placement training_placement(comm::Transport& world, const Manager& training) {
  const int ranks = training.layout().config().world_size();
  const std::vector<int> rank_of_process = comm::all_gather_values(world, training.world().rank());
  std::vector<int> process_of(static_cast<std::size_t>(ranks), -1);
  for (std::size_t p = 0; p < rank_of_process.size(); ++p)
    if (rank_of_process[p] < ranks) process_of[static_cast<std::size_t>(rank_of_process[p])] = static_cast<int>(p);
  DT_CHECK(std::count(process_of.begin(), process_of.end(), -1) == 0,
           "a training rank has no process in the copy's world");
  return plan::Placement(std::move(process_of));
}

}  // namespace

void Manager::release_weights() {
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i]) holder().release(buffers_[i], buffer_bytes(i));  // a pinned one stays until its last view
  buffers_.assign(rank_layout_.buffers.size(), nullptr);
}

SwitchStats Manager::receive_weights(const std::shared_ptr<Manager>& owner) {
  DT_CHECK(owner != nullptr && owner.get() != this, "receive_weights() needs another (training) manager");
  const Manager& training = *owner;
  const auto t0 = Clock::now();
  comm::Transport& w = world();
  const auto& kinds = layout_->options().kinds;
  if (kinds.size() != 1 || kinds[0] != vps::StateKind::kParam)
    DT_INPUT_ERROR("a weights copy holds the param kind alone; this manager holds ", kinds.size(), " kinds");
  if (w.size() != training.world().size())
    DT_INPUT_ERROR("the copy's world has ", w.size(), " processes, the training job's ", training.world().size());
  const int param = static_cast<int>(vps::StateKind::kParam);
  if (layout_->options().elem_bytes[param] != training.layout().options().elem_bytes[param])
    DT_INPUT_ERROR("the copy's weights have ", layout_->options().elem_bytes[param], "-byte elements, the training ",
                   "job's ", training.layout().options().elem_bytes[param],
                   "-byte ones: a copy keeps the training dtype");
  const vps::Layout source = layouts_(training.layout().config());
  const plan::Planner planner(source, *layout_, options_.topology, {training_placement(w, training), {}});
  const int me = w.rank();
  const plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  const vps::RankLayout src_layout = planner.src_rank_layout(me);
  std::vector<std::byte*> src;
  for (const vps::LocalBuffer& b : src_layout.buffers) src.push_back(training_buffer(training, b));
  const double plan_s = seconds_since(t0);

  release_weights();  // the previous copy's memory (or the constructor's zeroed buffers), for this one
  if (weights_owner_ != owner) {
    DT_CHECK(weights_owner_ == nullptr, "a weights copy takes the weights of one training manager");
    weights_owner_ = owner;  // from now on the training manager's pool holds this copy
    pool_.trim();            // the constructor's memory goes back to the system
  }
  BorrowedSources alloc(holder(), src);
  std::vector<std::byte*> dst(rank_layout_.buffers.size(), nullptr);
  const exec::TransitionStats ts =
      exec::run_transition(plan, src_layout, src, rank_layout_, dst, layout_->options().elem_bytes, w, alloc, options_);
  for (std::size_t i = 0; i < dst.size(); ++i)
    DT_CHECK(dst[i] != nullptr || rank_layout_.buffers[i].numel == 0, "engine left weights buffer ", i, " empty");
  buffers_ = std::move(dst);
  return gathered_stats(w, plan_s, ts, t0);
}

}  // namespace dynatrain::python
