#include "train/state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "common/error.h"
#include "train/bf16.h"
#include "train/data.h"

namespace dynatrain::train {

using vps::StateKind;

vps::LayoutOptions trainer_layout_options(std::int64_t bucket_elems, std::vector<vps::StateKind> kinds, bool bf16) {
  vps::LayoutOptions o;
  o.elem_bytes = trainer_elem_bytes(bf16);
  o.bucket_elems = bucket_elems;
  o.kinds = std::move(kinds);
  return o;
}

Arenas::Arenas(const vps::RankLayout& layout, exec::StateAllocator& alloc, vps::ElemBytes elem)
    : alloc_(&alloc), elem_(elem) {
  fill_missing(layout);
}

Arenas::~Arenas() { release_all(); }

Arenas::Arenas(Arenas&& other) noexcept
    : alloc_(other.alloc_), elem_(other.elem_), blocks_(std::exchange(other.blocks_, {})) {}

Arenas& Arenas::operator=(Arenas&& other) noexcept {
  if (this != &other) {
    release_all();
    alloc_ = other.alloc_;
    elem_ = other.elem_;
    blocks_ = std::exchange(other.blocks_, {});
  }
  return *this;
}

void Arenas::release_all() {
  for (auto& [k, b] : blocks_) alloc_->release(b.data, b.bytes);
  blocks_.clear();
}

std::byte* Arenas::bytes(const vps::LocalBuffer& b) const {
  auto it = blocks_.find(key(b));
  return it == blocks_.end() ? nullptr : it->second.data;
}

float* Arenas::data(const vps::LocalBuffer& b) const {
  DT_CHECK(elem_bytes(b.kind) == 4, vps::state_kind_name(b.kind), " holds ", elem_bytes(b.kind),
           "-byte elements, not fp32");
  return reinterpret_cast<float*>(bytes(b));
}

std::uint16_t* Arenas::bf16(const vps::LocalBuffer& b) const {
  DT_CHECK(elem_bytes(b.kind) == 2, vps::state_kind_name(b.kind), " holds ", elem_bytes(b.kind),
           "-byte elements, not bf16");
  return reinterpret_cast<std::uint16_t*>(bytes(b));
}

void Arenas::set(const vps::LocalBuffer& b, std::byte* p) {
  DT_CHECK(alloc_ != nullptr, "Arenas without an allocator");
  DT_CHECK(blocks_.count(key(b)) == 0, "buffer ", vps::state_kind_name(b.kind), " bucket ", b.bucket,
           " already has a block");
  blocks_[key(b)] = Block{p, block_bytes(b)};
}

std::byte* Arenas::take(const vps::LocalBuffer& b) {
  auto it = blocks_.find(key(b));
  if (it == blocks_.end()) return nullptr;
  DT_CHECK_EQ(it->second.bytes, block_bytes(b));
  std::byte* p = it->second.data;
  blocks_.erase(it);
  return p;
}

void Arenas::release(const vps::LocalBuffer& b) {
  if (std::byte* p = take(b)) alloc_->release(p, block_bytes(b));
}

void Arenas::fill_missing(const vps::RankLayout& layout) {
  DT_CHECK(alloc_ != nullptr, "Arenas without an allocator");
  for (const auto& b : layout.buffers) {
    if (b.numel == 0 || bytes(b) != nullptr) continue;
    const std::size_t n = block_bytes(b);
    std::byte* p = alloc_->allocate(n);
    std::memset(p, 0, n);
    blocks_[key(b)] = Block{p, n};
  }
}

std::size_t state_bytes(const vps::RankLayout& layout, const vps::ElemBytes& elem) {
  std::size_t total = 0;
  for (const auto& b : layout.buffers)
    total += static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(elem[static_cast<int>(b.kind)]);
  return total;
}

float init_value(const vps::ModelSpec& model, const vps::TensorSpec& t, std::int64_t index, std::uint64_t seed) {
  using R = vps::TensorRole;
  if (vps::is_norm(t.role)) return 1.0f;
  double stddev = 0.02;
  // The projections back into the residual stream: scaled by 1 / sqrt(2 * layers).
  if (t.role == R::kProj || t.role == R::kFc2 || t.role == R::kExpertFc2 || t.role == R::kSharedFc2)
    stddev /= std::sqrt(2.0 * static_cast<double>(model.layers));
  // Box-Muller on two counter-based uniforms.
  const std::uint64_t key = mix64(seed ^ (static_cast<std::uint64_t>(t.id) << 40));
  const std::uint64_t a = mix64(key ^ static_cast<std::uint64_t>(index) * 2);
  const std::uint64_t b = mix64(key ^ (static_cast<std::uint64_t>(index) * 2 + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * (1.0 / 9007199254740993.0);
  const double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return static_cast<float>(z * stddev);
}

void init_state(const vps::Layout& layout, const vps::RankLayout& rank_layout, Arenas& arenas, std::uint64_t seed,
                const std::vector<vps::StateKind>& loaded) {
  const auto& tensors = layout.tensors();
  for (const auto& buf : rank_layout.buffers)
    if (std::byte* p = arenas.bytes(buf)) std::memset(p, 0, arenas.block_bytes(buf));
  for (const auto& buf : rank_layout.buffers) {
    if (buf.kind != StateKind::kParam && buf.kind != StateKind::kMaster) continue;
    if (std::find(loaded.begin(), loaded.end(), buf.kind) != loaded.end()) continue;
    if (arenas.bytes(buf) == nullptr) continue;
    const bool half = arenas.elem_bytes(buf.kind) == 2;
    float* base = half ? nullptr : arenas.data(buf);
    std::uint16_t* base16 = half ? arenas.bf16(buf) : nullptr;
    for (const auto& seg : buf.segments) {
      const auto& t = tensors[seg.tensor];
      for_each_row(seg.box, t.shape, [&](std::int64_t full, std::int64_t local, std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i) {
          const float v = init_value(layout.model(), t, full + i, seed);
          if (half)
            base16[seg.offset + local + i] = bf16_from_float(v);
          else
            base[seg.offset + local + i] = v;
        }
      });
    }
  }
}

namespace {
constexpr int kGatherTag = 7001;

// Element i of a block of `elem`-byte elements (4: fp32, 2: bf16), as a float.
float element(const std::byte* block, int elem, std::int64_t i) {
  if (elem == 2) {
    std::uint16_t h;
    std::memcpy(&h, block + i * 2, 2);
    return float_from_bf16(h);
  }
  float f;
  std::memcpy(&f, block + i * 4, 4);
  return f;
}

std::vector<const vps::LocalBuffer*> buffers_of(const vps::RankLayout& rl, StateKind kind) {
  std::vector<const vps::LocalBuffer*> out;
  for (const auto& b : rl.buffers)
    if (b.kind == kind) out.push_back(&b);
  return out;
}
}  // namespace

Gathered gather_vps(const vps::Layout& layout, StateKind kind, const Arenas& arenas, comm::Transport& world) {
  Gathered g;
  const int rank = world.rank();
  const int active = layout.config().world_size();
  const int elem = arenas.elem_bytes(kind);
  DT_CHECK(active <= world.size(), "layout needs ", active, " ranks, world has ", world.size());
  if (rank != 0) {
    if (rank < active) {  // one message per non-empty buffer, in layout order
      const vps::RankLayout rl = layout.rank_layout(rank);
      for (const auto* b : buffers_of(rl, kind))
        if (b->numel > 0) world.isend(arenas.bytes(*b), b->numel * elem, 0, kGatherTag)->wait();
    }
    return g;
  }
  const auto& tensors = layout.tensors();
  g.tensors.resize(tensors.size());
  std::vector<std::vector<std::uint8_t>> written(tensors.size());
  for (const auto& t : tensors) {
    g.tensors[t.id].assign(t.numel(), 0.0f);
    written[t.id].assign(t.numel(), 0);
  }
  for (int r = 0; r < active; ++r) {
    const vps::RankLayout rl = layout.rank_layout(r);
    const auto bufs = buffers_of(rl, kind);
    std::vector<std::byte> data;
    for (auto* b : bufs) {
      if (b->numel == 0) continue;
      const std::byte* src = arenas.bytes(*b);
      if (r != 0) {
        data.resize(static_cast<std::size_t>(b->numel) * elem);
        world.irecv(data.data(), data.size(), r, kGatherTag)->wait();
        src = data.data();
      }
      for (const auto& seg : b->segments) {
        auto& full = g.tensors[seg.tensor];
        auto& w = written[seg.tensor];
        const std::byte* from = src + seg.offset * elem;
        for_each_row(seg.box, tensors[seg.tensor].shape, [&](std::int64_t f, std::int64_t l, std::int64_t n) {
          for (std::int64_t i = 0; i < n; ++i) {
            const float x = element(from, elem, l + i);
            if (w[f + i]) {
              if (std::memcmp(&full[f + i], &x, sizeof(float)) != 0) ++g.replica_mismatches;
            } else {
              full[f + i] = x;
              w[f + i] = 1;
            }
          }
        });
      }
    }
  }
  for (const auto& w : written)
    for (auto x : w) g.uncovered += x == 0;
  return g;
}

void scatter_vps(const vps::Layout& layout, const vps::RankLayout& rank_layout, StateKind kind,
                 const std::vector<std::vector<float>>& full, Arenas& arenas) {
  const auto& tensors = layout.tensors();
  const bool half = arenas.elem_bytes(kind) == 2;
  for (const auto& buf : rank_layout.buffers) {
    if (buf.kind != kind || arenas.bytes(buf) == nullptr) continue;
    for (const auto& seg : buf.segments) {
      const auto& src = full[seg.tensor];
      for_each_row(seg.box, tensors[seg.tensor].shape, [&](std::int64_t f, std::int64_t l, std::int64_t n) {
        if (half)
          to_bf16(src.data() + f, arenas.bf16(buf) + seg.offset + l, n);
        else
          std::memcpy(arenas.data(buf) + seg.offset + l, src.data() + f, n * sizeof(float));
      });
    }
  }
}

}  // namespace dynatrain::train
