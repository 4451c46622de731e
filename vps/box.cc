#include "vps/box.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace dynatrain::vps {

Box Box::of_shape(const std::vector<std::int64_t>& shape) {
  DT_CHECK(!shape.empty() && shape.size() <= kMaxDims, "shape rank ", shape.size());
  Box b;
  b.ndim = static_cast<std::uint8_t>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) b.hi[d] = shape[d];
  return b;
}

std::int64_t Box::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= std::max<std::int64_t>(0, hi[d] - lo[d]);
  return n;
}

bool Box::empty() const {
  for (int d = 0; d < ndim; ++d)
    if (hi[d] <= lo[d]) return true;
  return ndim == 0;
}

bool Box::contains(const Box& inner) const {
  if (inner.ndim != ndim) return false;
  for (int d = 0; d < ndim; ++d)
    if (inner.lo[d] < lo[d] || inner.hi[d] > hi[d]) return false;
  return true;
}

std::int64_t Box::linear_index(const Coord& c) const {
  std::int64_t index = 0;
  for (int d = 0; d < ndim; ++d) index = index * extent(d) + (c[d] - lo[d]);
  return index;
}

Coord Box::coord_at(std::int64_t i) const {
  Coord c{};
  for (int d = ndim - 1; d >= 0; --d) {
    c[d] = lo[d] + i % extent(d);
    i /= extent(d);
  }
  return c;
}

std::string Box::str() const {
  std::ostringstream os;
  os << '[';
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << lo[d] << ':' << hi[d];
  os << ']';
  return os.str();
}

Box intersect(const Box& a, const Box& b) {
  DT_CHECK_EQ(int(a.ndim), int(b.ndim));
  Box r;
  r.ndim = a.ndim;
  for (int d = 0; d < a.ndim; ++d) {
    r.lo[d] = std::max(a.lo[d], b.lo[d]);
    r.hi[d] = std::max(r.lo[d], std::min(a.hi[d], b.hi[d]));
  }
  return r;
}

// Recursive split on the leading dimension: [begin, end) inside `outer` where `begin`/`end` are
// row-major offsets. Each dim contributes at most a head, a middle and a tail piece; only the
// first dim can yield a middle of full sub-blocks, hence 2*ndim-1 boxes at most.
static void flat_range_rec(Box outer, int dim, std::int64_t begin, std::int64_t end, std::vector<Box>& out) {
  if (begin >= end) return;
  std::int64_t inner = 1;  // elements per step of `dim`
  for (int d = dim + 1; d < outer.ndim; ++d) inner *= outer.extent(d);
  const std::int64_t first = begin / inner, last = (end - 1) / inner;  // rows touched
  const bool head_full = begin % inner == 0;
  const bool tail_full = end % inner == 0 || end - last * inner == inner;
  if (dim + 1 == outer.ndim || (first == last && head_full && tail_full) || (head_full && tail_full)) {
    Box b = outer;
    b.lo[dim] = outer.lo[dim] + first;
    b.hi[dim] = outer.lo[dim] + last + 1;
    out.push_back(b);
    return;
  }
  auto row = [&](std::int64_t r) {
    Box b = outer;
    b.lo[dim] = outer.lo[dim] + r;
    b.hi[dim] = b.lo[dim] + 1;
    return b;
  };
  if (first == last) {  // one partial row: descend
    flat_range_rec(row(first), dim + 1, begin - first * inner, end - first * inner, out);
    return;
  }
  std::int64_t mid_lo = first, mid_hi = last + 1;
  if (!head_full) {
    flat_range_rec(row(first), dim + 1, begin - first * inner, inner, out);
    mid_lo = first + 1;
  }
  const bool tail_partial = end - last * inner != inner;
  if (tail_partial) mid_hi = last;
  if (mid_lo < mid_hi) {
    Box b = outer;
    b.lo[dim] = outer.lo[dim] + mid_lo;
    b.hi[dim] = outer.lo[dim] + mid_hi;
    out.push_back(b);
  }
  if (tail_partial) flat_range_rec(row(last), dim + 1, 0, end - last * inner, out);
}

void flat_range_boxes(const Box& outer, std::int64_t begin, std::int64_t end, std::vector<Box>& out) {
  DT_CHECK(0 <= begin && begin <= end && end <= outer.numel(), "flat range [", begin, ", ", end, ") outside box of ",
           outer.numel(), " elements");
  flat_range_rec(outer, 0, begin, end, out);
}

}  // namespace dynatrain::vps
