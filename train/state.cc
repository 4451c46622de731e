#include "train/state.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "common/error.h"
#include "train/data.h"

namespace dynatrain::train {

using vps::StateKind;

vps::LayoutOptions trainer_layout_options(std::int64_t bucket_elems,
                                          std::vector<vps::StateKind> kinds) {
  vps::LayoutOptions o;
  o.elem_bytes = vps::fp32_elem_bytes();
  o.bucket_elems = bucket_elems;
  o.kinds = std::move(kinds);
  return o;
}

Arenas::Arenas(const vps::RankLayout& layout, exec::StateAllocator& alloc) : alloc_(&alloc) {
  fill_missing(layout);
}

Arenas::~Arenas() { release_all(); }

Arenas::Arenas(Arenas&& other) noexcept
    : alloc_(other.alloc_), blocks_(std::exchange(other.blocks_, {})) {}

Arenas& Arenas::operator=(Arenas&& other) noexcept {
  if (this != &other) {
    release_all();
    alloc_ = other.alloc_;
    blocks_ = std::exchange(other.blocks_, {});
  }
  return *this;
}

void Arenas::release_all() {
  for (auto& [k, b] : blocks_) alloc_->release(reinterpret_cast<std::byte*>(b.data), b.bytes);
  blocks_.clear();
}

float* Arenas::data(const vps::LocalBuffer& b) const {
  auto it = blocks_.find(key(b));
  return it == blocks_.end() ? nullptr : it->second.data;
}

void Arenas::set(const vps::LocalBuffer& b, float* p) {
  DT_CHECK(alloc_ != nullptr, "Arenas without an allocator");
  DT_CHECK(blocks_.count(key(b)) == 0, "buffer ", vps::state_kind_name(b.kind), " bucket ", b.bucket,
           " already has a block");
  blocks_[key(b)] = Block{p, static_cast<std::size_t>(b.numel) * sizeof(float)};
}

float* Arenas::take(const vps::LocalBuffer& b) {
  auto it = blocks_.find(key(b));
  if (it == blocks_.end()) return nullptr;
  DT_CHECK_EQ(it->second.bytes, static_cast<std::size_t>(b.numel) * sizeof(float));
  float* p = it->second.data;
  blocks_.erase(it);
  return p;
}

void Arenas::release(const vps::LocalBuffer& b) {
  if (float* p = take(b)) alloc_->release(reinterpret_cast<std::byte*>(p), static_cast<std::size_t>(b.numel) * sizeof(float));
}

void Arenas::fill_missing(const vps::RankLayout& layout) {
  DT_CHECK(alloc_ != nullptr, "Arenas without an allocator");
  for (const auto& b : layout.buffers) {
    if (b.numel == 0 || data(b) != nullptr) continue;
    const std::size_t bytes = static_cast<std::size_t>(b.numel) * sizeof(float);
    auto* p = reinterpret_cast<float*>(alloc_->allocate(bytes));
    std::memset(p, 0, bytes);
    blocks_[key(b)] = Block{p, bytes};
  }
}

std::size_t state_bytes(const vps::RankLayout& layout) {
  std::size_t total = 0;
  for (const auto& b : layout.buffers) total += static_cast<std::size_t>(b.numel) * sizeof(float);
  return total;
}

float init_value(const vps::ModelSpec& model, const vps::TensorSpec& t, std::int64_t index,
                 std::uint64_t seed) {
  const std::string& n = t.name;
  if (n.find("norm") != std::string::npos) return 1.0f;
  double stddev = 0.02;
  if (n.ends_with("attn.proj.weight") || n.ends_with("fc2.weight"))
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

void init_state(const vps::Layout& layout, const vps::RankLayout& rank_layout, Arenas& arenas,
                std::uint64_t seed) {
  const auto& tensors = layout.tensors();
  for (const auto& buf : rank_layout.buffers)
    if (float* p = arenas.data(buf)) std::fill_n(p, buf.numel, 0.0f);
  for (const auto& buf : rank_layout.buffers) {
    if (buf.kind != StateKind::kParam && buf.kind != StateKind::kMaster) continue;
    float* base = arenas.data(buf);
    for (const auto& seg : buf.segments) {
      const auto& t = tensors[seg.tensor];
      for_each_row(seg.box, t.shape, [&](std::int64_t full, std::int64_t local, std::int64_t n) {
        for (std::int64_t i = 0; i < n; ++i)
          base[seg.offset + local + i] = init_value(layout.model(), t, full + i, seed);
      });
    }
  }
}

namespace {
constexpr int kGatherTag = 7001;

std::vector<const vps::LocalBuffer*> buffers_of(const vps::RankLayout& rl, StateKind kind) {
  std::vector<const vps::LocalBuffer*> out;
  for (const auto& b : rl.buffers)
    if (b.kind == kind) out.push_back(&b);
  return out;
}
}  // namespace

Gathered gather_vps(const vps::Layout& layout, StateKind kind, const Arenas& arenas,
                    comm::Transport& world) {
  Gathered g;
  const int rank = world.rank();
  const int active = layout.config().world_size();
  DT_CHECK(active <= world.size(), "layout needs ", active, " ranks, world has ", world.size());
  if (rank != 0) {
    if (rank < active) {  // one message per non-empty buffer, in layout order
      const vps::RankLayout rl = layout.rank_layout(rank);
      for (const auto* b : buffers_of(rl, kind))
        if (b->numel > 0) world.isend(arenas.data(*b), b->numel * sizeof(float), 0, kGatherTag)->wait();
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
    std::vector<float> data;
    for (auto* b : bufs) {
      if (b->numel == 0) continue;
      const float* src = arenas.data(*b);
      if (r != 0) {
        data.resize(b->numel);
        world.irecv(data.data(), b->numel * sizeof(float), r, kGatherTag)->wait();
        src = data.data();
      }
      for (const auto& seg : b->segments) {
        auto& full = g.tensors[seg.tensor];
        auto& w = written[seg.tensor];
        const float* from = src + seg.offset;
        for_each_row(seg.box, tensors[seg.tensor].shape,
                     [&](std::int64_t f, std::int64_t l, std::int64_t n) {
                       for (std::int64_t i = 0; i < n; ++i) {
                         if (w[f + i]) {
                           if (std::memcmp(&full[f + i], &from[l + i], sizeof(float)) != 0)
                             ++g.replica_mismatches;
                         } else {
                           full[f + i] = from[l + i];
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
  for (const auto& buf : rank_layout.buffers) {
    if (buf.kind != kind) continue;
    float* base = arenas.data(buf);
    for (const auto& seg : buf.segments) {
      const auto& src = full[seg.tensor];
      for_each_row(seg.box, tensors[seg.tensor].shape,
                   [&](std::int64_t f, std::int64_t l, std::int64_t n) {
                     std::memcpy(base + seg.offset + l, src.data() + f, n * sizeof(float));
                   });
    }
  }
}

}  // namespace dynatrain::train
