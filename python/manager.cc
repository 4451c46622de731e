#include "python/manager.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>

#include "common/error.h"
#include "exec/machine_rates.h"
#include "plan/planner.h"
#include "python/elastic.h"
#include "common/clock.h"

namespace dynatrain::python {

namespace {

std::size_t bytes_of(const vps::LocalBuffer& b, const vps::LayoutOptions& o) {
  return static_cast<std::size_t>(b.numel) * o.elem_bytes[static_cast<int>(b.kind)];
}

}  // namespace

void require_world(const vps::Layout& layout, int job_size) {
  if (layout.config().world_size() > job_size)
    DT_INPUT_ERROR("config ", layout.config().str(), " needs ", layout.config().world_size(),
                   " ranks but the communicator has ", job_size);
}

LayoutFactory model_layouts(vps::ModelSpec model, vps::LayoutOptions options) {
  return [model = std::move(model), options = std::move(options)](const vps::ParallelConfig& c) {
    return vps::Layout(model, c, options);
  };
}

LayoutFactory tensor_list_layouts(std::vector<vps::TensorSpec> tensors, vps::ModelSpec model,
                                  vps::LayoutOptions options) {
  return [tensors = std::move(tensors), model = std::move(model), options = std::move(options)](
             const vps::ParallelConfig& c) { return vps::Layout(tensors, model, c, options); };
}

Manager::Manager(std::unique_ptr<comm::Transport> world, LayoutFactory layouts, const vps::ParallelConfig& config,
                 exec::TransitionOptions options, bool prefault)
    : first_world_(std::move(world)),
      world_(first_world_.get()),
      layouts_(std::move(layouts)),
      options_(options),
      layout_(std::make_unique<vps::Layout>(layouts_(config))) {
  require_world(*layout_, world_->size());
  rank_layout_ = layout_->rank_layout(world_->rank());
  exec::machine_rates();  // measured here once, so that no switch's pause pays for it
  allocate_zeroed();
  if (prefault) {
    std::size_t state = 0;
    for (std::size_t i = 0; i < buffers_.size(); ++i) state += buffer_bytes(i);
    pool_.prefault(std::min(options_.mem_budget, state));
  }
}

Manager::Manager(std::shared_ptr<Elastic> joined, LayoutFactory layouts, const vps::ParallelConfig& config,
                 exec::TransitionOptions options)
    : elastic_(std::move(joined)),
      world_(&elastic_->edm().world()),
      layouts_(std::move(layouts)),
      options_(options),
      layout_(std::make_unique<vps::Layout>(layouts_(config))) {
  rank_layout_ = layout_->rank_layout(world_->rank());
  exec::machine_rates();  // before the commit it joins for (see the other constructor)
  DT_CHECK(rank_layout_.buffers.empty(), "a joining process holds rank ", world_->rank(), " of ", config.str());
}

Manager::~Manager() {
  drop_copies();
  release_weights();  // into the pool that holds them (a weights copy's: the training manager's)
}

comm::Transport& Manager::world() const {
  if (world_ == nullptr) DT_INPUT_ERROR("this process left the job in its last switch; it holds no state");
  return *world_;
}

std::size_t Manager::buffer_bytes(std::size_t i) const {
  return bytes_of(rank_layout_.buffers.at(i), layout_->options());
}

void Manager::allocate_zeroed() {
  buffers_.assign(rank_layout_.buffers.size(), nullptr);
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    const std::size_t n = buffer_bytes(i);
    if (n == 0) continue;
    buffers_[i] = pool_.allocate(n);
    std::memset(buffers_[i], 0, n);
  }
}

void Manager::validate(const vps::ParallelConfig& to) const { require_world(layouts_(to), world().size()); }

const Manager::CachedPlan* Manager::cached_plan(const std::string& from, const std::string& to) const {
  for (const CachedPlan& p : plans_)
    if (p.from == from && p.to == to) return &p;
  return nullptr;
}

const Manager::CachedPlan& Manager::keep_plan(CachedPlan plan) {
  if (plans_.size() == kCachedPlans) plans_.erase(plans_.begin());  // the oldest
  plans_.push_back(std::move(plan));
  return plans_.back();
}

SwitchStats Manager::switch_to(const vps::ParallelConfig& to, std::uint32_t zeroed_kinds, bool fill_zeroed) {
  const auto t0 = std::chrono::steady_clock::now();
  const int me = world().rank();
  const std::string from = layout_->config().str(), key = to.str();
  const CachedPlan* cached = cached_plan(from, key);
  const bool hit = cached != nullptr;
  if (!hit) {
    auto next = std::make_shared<const vps::Layout>(layouts_(to));
    require_world(*next, world_->size());
    const plan::Planner planner(*layout_, *next, options_.topology);
    plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
    cached = &keep_plan({from, key, std::move(next), std::move(plan), {}});
  }
  SwitchStats stats = move_state(std::make_unique<vps::Layout>(*cached->next), me, cached->plan, *world_, t0,
                                 zeroed_kinds, false, fill_zeroed);
  stats.plan_cached = hit;
  return stats;
}

SwitchStats Manager::move_state(std::unique_ptr<vps::Layout> next, int new_rank, const plan::RankPlan& plan,
                                comm::Transport& transition, std::chrono::steady_clock::time_point t0,
                                std::uint32_t zeroed_kinds, bool from_copies, bool fill_zeroed) {
  // A process without a new rank holds nothing (a rank beyond the layout).
  const int layout_rank = new_rank >= 0 ? new_rank : next->config().world_size() + transition.rank();
  vps::RankLayout dst_layout = next->rank_layout(layout_rank);
  const double plan_s = seconds_since(t0);

  std::vector<std::byte*> dst(dst_layout.buffers.size(), nullptr);
  exec::TransitionOptions options = options_;
  options.zeroed_kinds = zeroed_kinds;
  options.fill_zeroed = fill_zeroed;
  if (!from_copies) drop_copies();
  vps::RankLayout src_layout = rank_layout_;
  std::vector<std::byte*> src = buffers_;
  for (HeldCopy& c : copies_)  // after this rank's own buffers, ids numbered on (the plan's)
    for (std::size_t i = 0; i < c.layout.buffers.size(); ++i) {
      src_layout.buffers.push_back(c.layout.buffers[i]);
      src_layout.buffers.back().id = static_cast<std::uint32_t>(src.size());
      src.push_back(c.buffers[i]);
    }
  copies_.clear();  // the engine gives every source back to the pool
  const exec::TransitionStats ts = exec::run_transition(
      plan, src_layout, src, dst_layout, dst, layout_->options().elem_bytes, transition, keep_alive_, options);
  for (std::size_t i = 0; i < dst.size(); ++i)
    DT_CHECK(dst[i] != nullptr || dst_layout.buffers[i].numel == 0, "engine left destination buffer ", i, " empty");
  layout_ = std::move(next);
  rank_layout_ = std::move(dst_layout);
  buffers_ = std::move(dst);
  return gathered_stats(transition, plan_s, ts, t0);
}

void Manager::hold_copies(const std::vector<int>& ranks, const std::vector<std::uint32_t>& absent_kinds) {
  DT_CHECK(absent_kinds.size() == ranks.size(), absent_kinds.size(), " absent-kind masks for ", ranks.size(),
           " copies");
  drop_copies();
  for (std::size_t j = 0; j < ranks.size(); ++j) {
    const std::uint32_t absent = absent_kinds[j];
    HeldCopy c{ranks[j], absent, layout_->rank_layout(ranks[j]), {}};
    c.buffers.assign(c.layout.buffers.size(), nullptr);
    copies_.push_back(std::move(c));
    for (std::size_t i = 0; i < copies_.back().buffers.size(); ++i) {
      const std::size_t n = copy_buffer_bytes(copies_.size() - 1, i);
      if (n == 0 || (absent >> static_cast<int>(copies_.back().layout.buffers[i].kind) & 1u)) continue;
      copies_.back().buffers[i] = keep_alive_.allocate(n);
      std::memset(copies_.back().buffers[i], 0, n);
    }
  }
}

std::size_t Manager::copy_buffer_bytes(std::size_t c, std::size_t i) const {
  return bytes_of(copies_.at(c).layout.buffers.at(i), layout_->options());
}

std::size_t Manager::copy_bytes() const {
  std::size_t total = 0;
  for (std::size_t c = 0; c < copies_.size(); ++c)
    for (std::size_t i = 0; i < copies_[c].buffers.size(); ++i)
      if (copies_[c].buffers[i]) total += copy_buffer_bytes(c, i);
  return total;
}

void Manager::drop_copies() {
  for (std::size_t c = 0; c < copies_.size(); ++c)
    for (std::size_t i = 0; i < copies_[c].buffers.size(); ++i)
      if (copies_[c].buffers[i]) keep_alive_.release(copies_[c].buffers[i], copy_buffer_bytes(c, i));
  copies_.clear();
}

SwitchStats gathered_stats(comm::Transport& transport, double plan_s, const exec::TransitionStats& ts,
                           std::chrono::steady_clock::time_point t0) {
  struct Mine {
    double plan_s, engine_s, total_s;
    std::uint64_t sent, received, kept, messages, peak, src, dst;
    std::array<double, 8> parts;
    std::uint64_t faults, zero_copy, remapped, zeroed, ahead;
  };
  const Mine mine{plan_s,
                  ts.seconds,
                  seconds_since(t0),
                  ts.bytes_sent,
                  ts.bytes_received,
                  ts.bytes_kept,
                  ts.messages,
                  ts.peak_bytes,
                  ts.src_bytes,
                  ts.dst_bytes,
                  {ts.agree_seconds, ts.dry_seconds, ts.alloc_seconds, ts.pack_seconds, ts.unpack_seconds,
                   ts.keep_seconds, ts.wait_seconds, ts.system_seconds},
                  ts.page_faults,
                  ts.kept_zero_copy_bytes,
                  ts.kept_remapped_bytes,
                  ts.zeroed_bytes,
                  ts.committed_ahead_bytes};
  SwitchStats st;
  st.keep_path = ts.keep_path;  // the same choice on every rank (one machine's rates, one allocator policy)
  const std::array<double*, 8> parts{&st.agree_seconds,  &st.dry_seconds,  &st.alloc_seconds, &st.pack_seconds,
                                     &st.unpack_seconds, &st.keep_seconds, &st.wait_seconds,  &st.system_seconds};
  for (const Mine& m : comm::all_gather_values(transport, mine)) {
    for (std::size_t i = 0; i < parts.size(); ++i) *parts[i] = std::max(*parts[i], m.parts[i]);
    st.page_faults = std::max(st.page_faults, m.faults);
    st.kept_zero_copy_bytes += m.zero_copy;
    st.kept_remapped_bytes += m.remapped;
    st.committed_ahead_bytes += m.ahead;
    st.plan_seconds = std::max(st.plan_seconds, m.plan_s);
    st.engine_seconds = std::max(st.engine_seconds, m.engine_s);
    st.pause_seconds = std::max(st.pause_seconds, m.total_s);
    st.bytes_sent += m.sent;
    st.max_rank_bytes_received = std::max(st.max_rank_bytes_received, m.received);
    st.max_rank_bytes_zeroed = std::max(st.max_rank_bytes_zeroed, m.zeroed);
    st.bytes_kept += m.kept;
    st.messages += m.messages;
    st.peak_bytes = std::max(st.peak_bytes, m.peak);
    st.max_src_bytes = std::max(st.max_src_bytes, m.src);
    st.max_dst_bytes = std::max(st.max_dst_bytes, m.dst);
  }
  return st;
}

std::vector<BucketInfo> Manager::buckets() const {
  const auto& c = layout_->config();
  const vps::RankCoords rc = vps::rank_coords(c, world_->rank());
  std::map<std::pair<bool, std::int32_t>, BucketInfo> by_key;
  for (const auto& b : rank_layout_.buffers) {
    BucketInfo& info = by_key[{b.expert_group, b.bucket}];
    info.expert = b.expert_group;
    info.bucket = b.bucket;
    info.buffers.resize(vps::kNumStateKinds, -1);
    info.buffers[static_cast<int>(b.kind)] = b.id;
    const std::int64_t count = b.expert_group ? c.edp() : c.dp * c.cp;
    const bool sharded = vps::is_sharded(b.kind, c.zero);
    info.bucket_numel = sharded ? b.numel * count : b.numel;
    if (c.zero >= 1) {
      info.shard_lo = (b.expert_group ? rc.edp : rc.dense_shard) * (info.bucket_numel / count);
      info.shard_hi = info.shard_lo + info.bucket_numel / count;
    } else {
      info.shard_hi = info.bucket_numel;
    }
  }
  std::vector<BucketInfo> out;
  for (auto& [key, info] : by_key) out.push_back(std::move(info));  // dense first: false < true
  return out;
}

std::vector<TensorView> Manager::views() const {
  const auto& c = layout_->config();
  std::map<std::pair<bool, std::int32_t>, BucketInfo> by_key;
  for (auto& info : buckets()) by_key[{info.expert, info.bucket}] = info;
  std::vector<TensorView> out;
  for (vps::StateKind kind : layout_->options().kinds) {
    const bool sharded = vps::is_sharded(kind, c.zero);
    for (const vps::LocalShard& s : layout_->local_shards(world_->rank())) {
      const BucketInfo& b = by_key.at({s.expert_group, s.bucket});
      TensorView v;
      v.tensor = s.tensor;
      v.kind = kind;
      v.buffer = static_cast<std::uint32_t>(b.buffers[static_cast<int>(kind)]);
      v.sharded = sharded;
      v.local_shape = s.local_shape;
      if (!sharded) {
        v.offset = s.offset;
        v.length = s.numel;
      } else {
        const std::int64_t a = std::max(b.shard_lo, s.offset), z = std::min(b.shard_hi, s.offset + s.numel);
        if (a < z) {
          v.offset = a - b.shard_lo;
          v.length = z - a;
          v.start = a - s.offset;
        }
      }
      out.push_back(std::move(v));
    }
  }
  return out;
}

}  // namespace dynatrain::python
