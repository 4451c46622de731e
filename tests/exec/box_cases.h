// Random strided-copy cases for the box copy tests (host and device): a global box, two random
// storages inside it and their intersection (the box a copy between them moves), storages filled
// with a pure function of the global index, and the check of every destination element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "vps/box.h"

namespace dynatrain::exec::test {

inline vps::Box box(const std::vector<std::int64_t>& lo, const std::vector<std::int64_t>& hi) {
  vps::Box b;
  b.ndim = static_cast<std::uint8_t>(lo.size());
  for (std::size_t d = 0; d < lo.size(); ++d) b.lo[d] = lo[d], b.hi[d] = hi[d];
  return b;
}

// A random box inside `outer`; a third of its dims span `outer` whole (folded trailing dims).
inline vps::Box random_sub(std::mt19937& rng, const vps::Box& outer) {
  vps::Box b = outer;
  for (int d = 0; d < outer.ndim; ++d) {
    const std::int64_t e = outer.extent(d);
    std::int64_t a = rng() % e, z = rng() % e;
    if (a > z) std::swap(a, z);
    if (rng() % 3 == 0) a = 0, z = e - 1;
    b.lo[d] = outer.lo[d] + a;
    b.hi[d] = outer.lo[d] + z + 1;
  }
  return b;
}

struct BoxCase {
  vps::Box global, src, dst, q;  // q = src ∩ dst (may be empty)
};

// `nd` dims, each global extent in [1, max_extent].
inline BoxCase random_box_case(std::mt19937& rng, int nd, int max_extent) {
  std::vector<std::int64_t> lo(nd, 0), hi(nd);
  for (int d = 0; d < nd; ++d) hi[d] = 1 + rng() % max_extent;
  BoxCase c;
  c.global = box(lo, hi);
  c.src = random_sub(rng, c.global);
  c.dst = random_sub(rng, c.global);
  c.q = vps::intersect(c.src, c.dst);
  return c;
}

// True when global coordinate `c` lies in `b`.
inline bool holds(const vps::Box& b, const vps::Coord& c) {
  for (int d = 0; d < b.ndim; ++d)
    if (c[d] < b.lo[d] || c[d] >= b.hi[d]) return false;
  return true;
}

// Byte `b` of the element with global row-major index `g`.
inline std::byte content(std::int64_t g, std::size_t b) {
  const std::uint64_t h = (static_cast<std::uint64_t>(g) + 1) * 0x9E3779B97F4A7C15ull + b * 0xBF58476D1CE4E5B9ull;
  return static_cast<std::byte>(h >> 56);
}

// Storage of `outer` (dense row-major), every element's bytes a function of its global index.
inline std::vector<std::byte> filled(const vps::Box& outer, const vps::Box& global, std::size_t elem, std::size_t pad) {
  std::vector<std::byte> v(pad + static_cast<std::size_t>(outer.numel()) * elem, std::byte{0xEE});
  for (std::int64_t i = 0; i < outer.numel(); ++i)
    for (std::size_t b = 0; b < elem; ++b)
      v[pad + static_cast<std::size_t>(i) * elem + b] = content(global.linear_index(outer.coord_at(i)), b);
  return v;
}

// Every element of `q` in `dst` (storage of `dst_outer` at byte `pad`) holds its content; every
// other element still holds the 0xEE it started with.
inline void expect_copied(const std::vector<std::byte>& dst, std::size_t pad, const vps::Box& dst_outer,
                          const vps::Box& q, const vps::Box& global, std::size_t elem, const char* what) {
  for (std::int64_t i = 0; i < dst_outer.numel(); ++i) {
    const vps::Coord c = dst_outer.coord_at(i);
    const bool in_q = holds(q, c);
    for (std::size_t b = 0; b < elem; ++b) {
      const std::byte want = in_q ? content(global.linear_index(c), b) : std::byte{0xEE};
      ASSERT_EQ(dst[pad + static_cast<std::size_t>(i) * elem + b], want)
          << what << ": element " << i << " byte " << b << " of " << dst_outer.str() << ", q " << q.str();
    }
  }
}

}  // namespace dynatrain::exec::test
