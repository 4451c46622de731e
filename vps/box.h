// Boxes and flat ranges: the geometry of the Virtual Parameter Space.
//
// A Box is a half-open hyper-rectangle [lo, hi) in a logical tensor's global (unsharded)
// coordinates, with 1..kMaxDims dimensions. Invariant: lo[d] <= hi[d] for d < ndim; entries at
// d >= ndim are 0 so that equal boxes compare equal. An empty box has some lo[d] == hi[d].
//
// A flat range [begin, end) of a box B counts B's elements in row-major order. Any flat range is
// a union of at most 2*ndim-1 boxes (flat_range_boxes), and each of those is a contiguous run of
// B's row-major order. That is how ZeRO's flat-buffer shards enter the VPS.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace dynatrain::vps {

inline constexpr int kMaxDims = 4;
using Coord = std::array<std::int64_t, kMaxDims>;

struct Box {
  std::uint8_t ndim = 0;
  Coord lo{};
  Coord hi{};

  // The whole tensor of the given shape.
  static Box of_shape(const std::vector<std::int64_t>& shape);

  std::int64_t extent(int d) const { return hi[d] - lo[d]; }
  std::int64_t numel() const;
  bool empty() const;
  bool contains(const Box& inner) const;
  // Row-major index of global coordinate `c` inside this box (c must lie in it).
  std::int64_t linear_index(const Coord& c) const;
  // Global coordinate of the `i`-th element of this box in row-major order.
  Coord coord_at(std::int64_t i) const;
  std::string str() const;

  friend bool operator==(const Box&, const Box&) = default;
  friend auto operator<=>(const Box& a, const Box& b) = default;
};

// The common part of two boxes of the same rank; empty() when they do not overlap.
Box intersect(const Box& a, const Box& b);

// Appends to `out` the boxes whose union is the row-major elements [begin, end) of `outer`,
// in row-major order. At most 2*ndim-1 boxes; none when begin == end.
void flat_range_boxes(const Box& outer, std::int64_t begin, std::int64_t end, std::vector<Box>& out);

}  // namespace dynatrain::vps
