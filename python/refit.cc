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
//  * A bf16 copy of an fp32 job is cast on the sending side: each param buffer the plan reads
//    is first cast (round to nearest even, as torch) into a bf16 buffer of the copy's pool,
//    which the engine sends from and releases, so the link carries 2-byte elements.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "common/clock.h"
#include "common/error.h"
#include "exec/engine.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "python/manager.h"
#include "train/bf16.h"

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

// The process (of the copy's world) that holds each rank of the training layout: `members[q]`
// is the training world's rank of the copy's process q (the copy's order, known to every
// process without communication), and training rank r is held by training world rank r.
plan::Placement training_placement(const std::vector<int>& members, int world_size, const Manager& training) {
  const int ranks = training.layout().config().world_size();
  if (static_cast<int>(members.size()) != world_size)
    DT_INPUT_ERROR("the copy's order names ", members.size(), " processes, its world has ", world_size);
  std::vector<int> process_of(static_cast<std::size_t>(world_size), -1);
  for (std::size_t q = 0; q < members.size(); ++q) {
    const int r = members[q];
    if (r < 0 || r >= world_size || process_of[static_cast<std::size_t>(r)] != -1)
      DT_INPUT_ERROR("the copy's order is not a permutation of the training world's ranks 0..", world_size - 1);
    process_of[static_cast<std::size_t>(r)] = static_cast<int>(q);
  }
  process_of.resize(static_cast<std::size_t>(ranks));
  return plan::Placement(std::move(process_of));
}

// Ids of the source buffers this rank's part of `plan` reads (keeps and sends).
std::set<std::uint32_t> buffers_read(const plan::RankPlan& plan) {
  std::set<std::uint32_t> ids;
  for (const plan::Piece& p : plan.keep) ids.insert(p.src_buffer);
  for (const auto& [peer, pieces] : plan.send)
    for (const plan::Piece& p : pieces) ids.insert(p.src_buffer);
  return ids;
}

// Replaces each fp32 source buffer the plan reads by its bf16 cast, taken from `alloc` (the
// engine releases it there like any source it owns); the others stay borrowed (never read).
void cast_sources_to_bf16(const plan::RankPlan& plan, const vps::RankLayout& layout, std::vector<std::byte*>& src,
                          exec::StateAllocator& alloc) {
  for (std::uint32_t id : buffers_read(plan)) {
    const std::int64_t n = layout.buffers.at(id).numel;
    if (n == 0 || src.at(id) == nullptr) continue;
    auto* half = alloc.allocate(static_cast<std::size_t>(n) * 2);
    train::to_bf16(reinterpret_cast<const float*>(src[id]), reinterpret_cast<std::uint16_t*>(half), n);
    src[id] = half;
  }
}

// The copy's element size against the training job's: equal, or a bf16 copy of an fp32 job
// (cast by the senders). Anything else is an InputError naming both.
bool casts_on_send(int copy_bytes, int training_bytes) {
  if (copy_bytes == training_bytes) return false;
  if (copy_bytes == 2 && training_bytes == 4) return true;
  DT_INPUT_ERROR("the copy's weights have ", copy_bytes, "-byte elements, the training job's ", training_bytes,
                 "-byte ones: a copy keeps the training dtype or narrows fp32 to bf16");
}

}  // namespace

void Manager::release_weights() {
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i]) holder().release(buffers_[i], buffer_bytes(i));  // a pinned one stays until its last view
  buffers_.assign(rank_layout_.buffers.size(), nullptr);
}

SwitchStats Manager::receive_weights(const std::shared_ptr<Manager>& owner, const std::vector<int>& members) {
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
  const bool cast = casts_on_send(layout_->options().elem_bytes[param], training.layout().options().elem_bytes[param]);
  std::string from = training.layout().config().str() + " on";
  for (int r : members) from.append(" ").append(std::to_string(r));
  const CachedPlan* cached = cached_plan(from, layout_->config().str());
  const bool hit = cached != nullptr;
  if (!hit) {
    const vps::Layout source = layouts_(training.layout().config());
    const plan::Planner planner(source, *layout_, options_.topology,
                                {training_placement(members, w.size(), training), {}, {}});
    const int me = w.rank();
    plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
    cached = &keep_plan({from, layout_->config().str(), nullptr, std::move(plan), planner.src_rank_layout(me)});
  }
  const plan::RankPlan& plan = cached->plan;
  const vps::RankLayout& src_layout = cached->src;
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
  const auto cast_started = Clock::now();
  if (cast) cast_sources_to_bf16(plan, src_layout, src, holder());
  const double cast_s = seconds_since(cast_started);
  std::vector<std::byte*> dst(rank_layout_.buffers.size(), nullptr);
  exec::TransitionStats ts =
      exec::run_transition(plan, src_layout, src, rank_layout_, dst, layout_->options().elem_bytes, w, alloc, options_);
  ts.pack_seconds += cast_s;  // the senders' cast is part of packing what they send
  for (std::size_t i = 0; i < dst.size(); ++i)
    DT_CHECK(dst[i] != nullptr || rank_layout_.buffers[i].numel == 0, "engine left weights buffer ", i, " empty");
  buffers_ = std::move(dst);
  SwitchStats stats = gathered_stats(w, plan_s, ts, t0);
  stats.plan_cached = hit;
  return stats;
}

}  // namespace dynatrain::python
