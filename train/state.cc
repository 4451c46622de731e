#include "train/state.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "train/data.h"

namespace dynatrain::train {

using vps::StateKind;

vps::LayoutOptions trainer_layout_options(std::int64_t bucket_elems,
                                          std::vector<vps::StateKind> kinds) {
  vps::LayoutOptions o;
  o.elem_bytes = {4, 4, 4, 4, 4};
  o.bucket_elems = bucket_elems;
  o.kinds = std::move(kinds);
  return o;
}

Arenas allocate_arenas(const vps::RankLayout& layout) {
  Arenas a;
  std::array<std::int64_t, vps::kNumStateKinds> size{};
  for (const auto& b : layout.buffers) {
    auto& s = size[static_cast<int>(b.kind)];
    s = std::max(s, b.arena_offset + b.numel);
  }
  for (int k = 0; k < vps::kNumStateKinds; ++k) a.kind[k].assign(size[k], 0.0f);
  return a;
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
  for (auto& v : arenas.kind) std::fill(v.begin(), v.end(), 0.0f);
  for (const auto& buf : rank_layout.buffers) {
    if (buf.kind != StateKind::kParam && buf.kind != StateKind::kMaster) continue;
    float* base = arenas.data(buf.kind) + buf.arena_offset;
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
    if (rank < active) {
      const auto& arena = arenas.kind[static_cast<int>(kind)];
      if (!arena.empty()) world.isend(arena.data(), arena.size() * sizeof(float), 0, kGatherTag)->wait();
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
    std::int64_t total = 0;
    for (auto* b : bufs) total = std::max(total, b->arena_offset + b->numel);
    std::vector<float> data;
    const float* src = arenas.data(kind);
    if (r != 0) {
      data.resize(total);
      if (total > 0) world.irecv(data.data(), total * sizeof(float), r, kGatherTag)->wait();
      src = data.data();
    }
    for (auto* b : bufs) {
      for (const auto& seg : b->segments) {
        auto& full = g.tensors[seg.tensor];
        auto& w = written[seg.tensor];
        const float* from = src + b->arena_offset + seg.offset;
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
    float* base = arenas.data(kind) + buf.arena_offset;
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
