#include "vps/layout.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "common/error.h"

namespace dynatrain::vps {

std::int64_t RankLayout::bytes(const LayoutOptions& options) const {
  std::int64_t total = 0;
  for (const auto& b : buffers) total += b.numel * options.elem_bytes[static_cast<int>(b.kind)];
  return total;
}

namespace {

// Sizes stay far from int64 overflow everywhere below (boxes, flat offsets, byte counts, the
// planner's sums) because every tensor and the whole model are bounded here, once.
constexpr std::int64_t kMaxModelElems = std::int64_t{1} << 50;  // ~1.1e15, 16000x llama2-70b

void check_model_size(const std::string& model, const std::vector<TensorSpec>& tensors) {
  std::int64_t total = 0;
  for (const auto& t : tensors) {
    std::int64_t n = 1;
    for (auto extent : t.shape)
      if (extent < 1 || __builtin_mul_overflow(n, extent, &n) || n > kMaxModelElems)
        DT_INPUT_ERROR("model '", model, "': tensor ", t.name, " (an extent of ", extent,
                       ") is empty or beyond this build's limit of ", kMaxModelElems,
                       " elements a model; check hidden, ffn, heads, head_dim and vocab sizes");
    total += n;
    if (total > kMaxModelElems)
      DT_INPUT_ERROR("model '", model, "' has more than ", kMaxModelElems,
                     " elements, beyond this build's limit; check hidden, ffn, layers and vocab sizes");
  }
}

void check_options(const LayoutOptions& o) {
  if (o.bucket_elems <= 0) DT_INPUT_ERROR("bucket size ", o.bucket_elems, " must be positive");
  if (o.align_elems < 1 || o.align_elems > (std::int64_t{1} << 20))
    DT_INPUT_ERROR("alignment ", o.align_elems, " elements is outside 1..", std::int64_t{1} << 20);
}

}  // namespace

Layout::Layout(const ModelSpec& model, ParallelConfig config, LayoutOptions options)
    : model_(model),
      config_(std::move(config)),
      options_(std::move(options)),
      shard_cache_(std::make_shared<ShardCache>()) {
  config_.validate_for(model_);  // ModelSpec::validate bounds the layer count first
  tensors_ = build_tensors(model_);
  check_model_size(model_.name, tensors_);
  check_options(options_);
}

namespace {

// The checks ParallelConfig::validate_for makes against a ModelSpec, made against the caller's
// own tensors instead; fills config.pp_layers with the even split when it was empty.
void validate_custom(std::vector<TensorSpec>& tensors, const ModelSpec& model, ParallelConfig& c) {
  if (tensors.empty()) DT_INPUT_ERROR("model '", model.name, "' has no tensors");
  std::set<std::string> names;  // names key checkpoints and the Python views
  for (const TensorSpec& t : tensors)
    if (!names.insert(t.name).second)
      DT_INPUT_ERROR("model '", model.name, "' has two tensors named '", t.name, "'; tensor names must be unique");
  if (model.layers < 1) DT_INPUT_ERROR("model '", model.name, "': layers=", model.layers, " must be at least 1");
  bool any_expert = false;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TensorSpec& t = tensors[i];
    t.id = static_cast<std::uint32_t>(i);
    const int ndim = static_cast<int>(t.shape.size());
    if (ndim < 1 || ndim > kMaxDims)
      DT_INPUT_ERROR("tensor '", t.name, "' has ", ndim, " dimensions; valid: 1..", kMaxDims);
    for (auto e : t.shape)
      if (e < 1) DT_INPUT_ERROR("tensor '", t.name, "' has a dimension of size ", e, "; sizes must be positive");
    if (t.stage == Stage::kLayer && (t.layer < 0 || t.layer >= model.layers))
      DT_INPUT_ERROR("tensor '", t.name, "': layer ", t.layer, " is outside 0..", model.layers - 1);
    const int parts = t.expert ? c.etp : c.tp;
    const char* key = t.expert ? "etp" : "tp";
    if (t.split == TpSplit::kQkv)
      DT_INPUT_ERROR("tensor '", t.name,
                     "': the fused-QKV split is for built-in models; valid splits: replicated, dim, vocab");
    if (t.split == TpSplit::kDim) {
      if (t.split_dim >= ndim)
        DT_INPUT_ERROR("tensor '", t.name, "': split dim ", int(t.split_dim), " is not below its ", ndim,
                       " dimensions");
      if (t.shape[t.split_dim] % parts != 0)
        DT_INPUT_ERROR(key, "=", parts, " does not divide dim ", int(t.split_dim), " (", t.shape[t.split_dim],
                       ") of tensor '", t.name, "'");
    }
    if (t.expert) {
      any_expert = true;
      if (t.shape[0] % c.ep != 0)
        DT_INPUT_ERROR("ep=", c.ep, " does not divide the ", t.shape[0], " experts (dim 0) of tensor '", t.name, "'");
    }
  }
  if (!any_expert && (c.ep != 1 || c.etp != 1))
    DT_INPUT_ERROR("ep=", c.ep, ", etp=", c.etp, ": model '", model.name,
                   "' has no expert tensors; valid: ep=1, etp=1");
  if ((c.tp * c.cp * c.dp) % (c.etp * c.ep) != 0)
    DT_INPUT_ERROR("ep*etp=", c.ep * c.etp, " does not divide tp*cp*dp=", c.tp * c.cp * c.dp);
  if (c.pp > model.layers)
    DT_INPUT_ERROR("pp=", c.pp, " exceeds the model's ", model.layers, " layers; valid pp: 1..", model.layers);
  if (c.pp_layers.empty()) {
    if (model.layers % c.pp != 0)
      DT_INPUT_ERROR("pp=", c.pp, " does not divide ", model.layers,
                     " layers; give uneven stages with pp_layers=N/N/..., one count per stage");
    c.pp_layers.assign(c.pp, model.layers / c.pp);
  }
  std::int64_t sum = 0;
  for (auto n : c.pp_layers) {
    if (n < 1) DT_INPUT_ERROR("pp_layers: every stage needs at least one layer, got ", n);
    sum += n;
  }
  if (sum != model.layers) DT_INPUT_ERROR("pp_layers sum to ", sum, " but the model has ", model.layers, " layers");
}

}  // namespace

Layout::Layout(std::vector<TensorSpec> tensors, const ModelSpec& model, ParallelConfig config, LayoutOptions options)
    : model_(model),
      config_(std::move(config)),
      options_(std::move(options)),
      tensors_(std::move(tensors)),
      own_tensors_(true),
      shard_cache_(std::make_shared<ShardCache>()) {
  validate_custom(tensors_, model_, config_);
  check_options(options_);
}

Layout Layout::relaid(ParallelConfig config, LayoutOptions options) const {
  if (own_tensors_) return Layout(tensors_, model_, std::move(config), std::move(options));
  return Layout(model_, std::move(config), std::move(options));
}

namespace {

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// The boxes a rank holds of tensor `t` (stored one after another) and its local shape.
void shard_tensor(const ModelSpec& m, const ParallelConfig& c, const RankCoords& rc, const TensorSpec& t,
                  LocalShard& out) {
  Box box = t.full_box();
  int parts = c.tp, index = rc.tp;
  if (t.expert) {
    const std::int64_t per = t.shape[0] / c.ep;
    box.lo[0] = rc.ep * per;
    box.hi[0] = box.lo[0] + per;
    parts = c.etp;
    index = rc.etp;
  }
  out.local_shape.assign(t.shape.begin(), t.shape.end());
  out.local_shape[0] = box.extent(0);
  auto split_even = [&](int dim) {
    const std::int64_t per = t.shape[dim] / parts;
    box.lo[dim] = index * per;
    box.hi[dim] = box.lo[dim] + per;
    out.local_shape[dim] = per;
  };
  switch (t.split) {
    case TpSplit::kReplicated: break;
    case TpSplit::kDim: split_even(t.split_dim); break;
    case TpSplit::kVocab: {
      const std::int64_t rows = round_up(t.shape[0], m.vocab_divisible_by * parts) / parts;
      box.lo[0] = std::min(t.shape[0], index * rows);
      box.hi[0] = std::min(t.shape[0], (index + 1) * rows);
      out.local_shape[0] = rows;  // trailing rows past the vocab are padding
      break;
    }
    case TpSplit::kQkv: {
      const std::int64_t groups = t.shape[0], q = t.shape[1] - 2;
      if (parts <= groups) {
        split_even(0);
        break;
      }
      // tp > groups: `per_group` ranks share group g; each holds a slice of its query heads
      // followed by the group's k and v rows (replicated across those ranks).
      const std::int64_t per_group = parts / groups, g = index / per_group, j = index % per_group;
      const std::int64_t q_local = q / per_group;
      Box q_box = box, kv_box = box;
      q_box.lo[0] = kv_box.lo[0] = g;
      q_box.hi[0] = kv_box.hi[0] = g + 1;
      q_box.lo[1] = j * q_local;
      q_box.hi[1] = q_box.lo[1] + q_local;
      kv_box.lo[1] = q;
      kv_box.hi[1] = q + 2;
      out.boxes = {q_box, kv_box};
      out.local_shape[0] = 1;
      out.local_shape[1] = q_local + 2;
      out.numel = q_box.numel() + kv_box.numel();
      return;
    }
  }
  out.boxes.clear();
  if (!box.empty()) out.boxes.push_back(box);
  out.numel = 1;
  for (auto s : out.local_shape) out.numel *= s;
}

bool held_on_stage(const TensorSpec& t, const ParallelConfig& c, int stage, const std::vector<std::int64_t>& offsets) {
  switch (t.stage) {
    case Stage::kPre: return stage == 0 || (t.also_on_last_stage && stage == c.pp - 1);
    case Stage::kPost: return stage == c.pp - 1;
    case Stage::kLayer: return offsets[stage] <= t.layer && t.layer < offsets[stage + 1];
  }
  return false;
}

}  // namespace

bool is_sharded(StateKind kind, int zero) {
  switch (kind) {
    case StateKind::kParam: return zero >= 3;
    case StateKind::kGrad: return zero >= 2;
    default: return zero >= 1;
  }
}

namespace {

// Appends the segments of shard `s` that fall in bucket elements [lo, hi), with offsets
// relative to lo. Each box of the shard is cut with flat_range_boxes where the range ends inside.
// `pieces` is scratch space, passed in so that hot loops allocate it once.
void append_segments(const LocalShard& s, std::int64_t lo, std::int64_t hi, std::vector<Segment>& out,
                     std::vector<Box>& pieces) {
  std::int64_t box_start = s.offset;  // bucket position of the box's first element
  for (const Box& box : s.boxes) {
    const std::int64_t box_end = box_start + box.numel();
    const std::int64_t a = std::max(lo, box_start), z = std::min(hi, box_end);
    if (a < z) {
      pieces.clear();
      flat_range_boxes(box, a - box_start, z - box_start, pieces);
      std::int64_t at = a - lo;
      for (const Box& p : pieces) {
        out.push_back({s.tensor, p, at});
        at += p.numel();
      }
    }
    box_start = box_end;
  }
}

}  // namespace

struct Layout::ShardCache {
  std::mutex mutex;
  std::map<std::array<int, 4>, std::vector<LocalShard>> by_class;
};

std::vector<LocalShard> Layout::local_shards(int rank) const { return cached_shards(rank); }

const std::vector<LocalShard>& Layout::cached_shards(int rank) const {
  const RankCoords rc = rank_coords(config_, rank);
  const std::array<int, 4> key{rc.active ? rc.tp : -1, rc.pp, rc.ep, rc.etp};
  std::lock_guard<std::mutex> lock(shard_cache_->mutex);
  auto it = shard_cache_->by_class.find(key);
  if (it == shard_cache_->by_class.end()) it = shard_cache_->by_class.emplace(key, compute_shards(rank)).first;
  return it->second;
}

std::vector<LocalShard> Layout::compute_shards(int rank) const {
  const RankCoords rc = rank_coords(config_, rank);
  std::vector<LocalShard> shards;
  if (!rc.active) return shards;
  const auto offsets = stage_layer_offsets(config_);
  for (bool expert_group : {false, true}) {
    std::int32_t bucket = 0;
    std::int64_t fill = 0;  // elements in the open bucket; padding is added in rank_layout()
    for (const auto& t : tensors_) {
      if (t.expert != expert_group || !held_on_stage(t, config_, rc.pp, offsets)) continue;
      LocalShard s;
      s.tensor = t.id;
      s.expert_group = expert_group;
      shard_tensor(model_, config_, rc, t, s);
      s.bucket = bucket;
      s.offset = round_up(fill, options_.align_elems);
      fill = s.offset + s.numel;
      shards.push_back(std::move(s));
      if (fill >= options_.bucket_elems) {
        ++bucket;
        fill = 0;
      }
    }
  }
  return shards;
}

RankLayout Layout::rank_layout(int rank) const {
  RankLayout layout;
  layout.rank = rank;
  visit_buffers(rank, [&](const LocalBuffer& meta, const std::vector<Segment>& segments) {
    layout.buffers.push_back(meta);
    layout.buffers.back().segments = segments;
  });
  return layout;
}

void Layout::visit_buffers(int rank, const BufferVisitor& visit, unsigned kind_mask) const {
  const RankCoords rc = rank_coords(config_, rank);
  if (!rc.active) return;
  std::uint32_t next_id = 0;
  const auto& shards = cached_shards(rank);
  std::vector<Segment> segments[2];  // reused bucket to bucket
  std::vector<Box> pieces;
  std::array<std::int64_t, kNumStateKinds> arena{};
  for (bool expert_group : {false, true}) {
    const std::int64_t shard_count = expert_group ? config_.edp() : config_.dp * config_.cp;
    const std::int64_t shard_index = expert_group ? rc.edp : rc.dense_shard;
    // Bucket extents: [first shard, end shard) and padded size.
    struct Bucket {
      std::size_t begin = 0, end = 0;
      std::int64_t size = 0;
    };
    std::vector<Bucket> buckets;
    for (std::size_t i = 0; i < shards.size(); ++i) {
      if (shards[i].expert_group != expert_group) continue;
      if (buckets.empty() || static_cast<std::int32_t>(buckets.size()) - 1 != shards[i].bucket)
        buckets.push_back({i, i, 0});
      buckets.back().end = i + 1;
      buckets.back().size = shards[i].offset + shards[i].numel;
    }
    for (auto& b : buckets)
      if (config_.zero >= 1) b.size = round_up(b.size, shard_count * options_.align_elems);
    for (std::size_t bi = 0; bi < buckets.size(); ++bi) {
      const Bucket& b = buckets[bi];
      // Segments of the whole bucket and of this rank's shard of it; each kind uses one of them.
      segments[0].clear();
      segments[1].clear();
      for (int sharded = 0; sharded < 2; ++sharded) {
        bool needed = false;
        for (StateKind kind : options_.kinds)
          needed =
              needed || ((kind_mask >> static_cast<int>(kind) & 1u) && is_sharded(kind, config_.zero) == bool(sharded));
        if (!needed) continue;
        const std::int64_t lo = sharded ? shard_index * (b.size / shard_count) : 0;
        const std::int64_t hi = sharded ? lo + b.size / shard_count : b.size;
        for (std::size_t si = b.begin; si < b.end; ++si) append_segments(shards[si], lo, hi, segments[sharded], pieces);
      }
      for (StateKind kind : options_.kinds) {
        const bool sharded = is_sharded(kind, config_.zero);
        LocalBuffer buf;
        buf.id = next_id++;
        buf.kind = kind;
        buf.expert_group = expert_group;
        buf.bucket = static_cast<std::int32_t>(bi);
        buf.numel = sharded ? b.size / shard_count : b.size;
        buf.arena_offset = arena[static_cast<int>(kind)];
        arena[static_cast<int>(kind)] += buf.numel;
        if (kind_mask >> static_cast<int>(kind) & 1u) visit(buf, segments[sharded]);
      }
    }
  }
}

}  // namespace dynatrain::vps
