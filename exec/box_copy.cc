#include "exec/box_copy.h"

#include <cstring>

#include "common/error.h"

namespace dynatrain::exec {
namespace {

// Row-major strides (in elements) of the storage of `b`.
vps::Coord strides_of(const vps::Box& b) {
  vps::Coord s{};
  std::int64_t acc = 1;
  for (int d = b.ndim - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= b.extent(d);
  }
  return s;
}

std::int64_t offset_in(const vps::Box& outer, const vps::Coord& c, const vps::Coord& strides) {
  std::int64_t off = 0;
  for (int d = 0; d < outer.ndim; ++d) off += (c[d] - outer.lo[d]) * strides[d];
  return off;
}

}  // namespace

StridedRuns strided_runs(const vps::Box& q, const vps::Box& src_box, const vps::Box& dst_box, std::size_t elem) {
  static_assert(kIndexMaxDims == vps::kMaxDims, "exec/box_index.h assumes vps::kMaxDims");
  DT_CHECK(!q.empty(), "strided_runs of the empty box ", q.str());
  DT_CHECK(src_box.contains(q), "box ", q.str(), " outside source storage ", src_box.str());
  DT_CHECK(dst_box.contains(q), "box ", q.str(), " outside destination storage ", dst_box.str());
  const int nd = q.ndim;
  const vps::Coord ss = strides_of(src_box), ds = strides_of(dst_box);
  // Fold trailing dims that are full in both storages; `m` is the first folded dim.
  int m = nd;
  while (m > 0 && q.extent(m - 1) == src_box.extent(m - 1) && q.extent(m - 1) == dst_box.extent(m - 1)) --m;
  // One contiguous run covers dims [run_dim, nd) (or everything when m == 0).
  const int run_dim = m > 0 ? m - 1 : 0;
  const auto e = static_cast<std::int64_t>(elem);
  StridedRuns r;
  r.row_dims = run_dim;
  r.run_bytes = e;
  for (int d = run_dim; d < nd; ++d) r.run_bytes *= q.extent(d);
  r.rows = 1;
  for (int d = 0; d < run_dim; ++d) {
    r.extent[d] = q.extent(d);
    r.src_stride[d] = ss[d] * e;
    r.dst_stride[d] = ds[d] * e;
    r.rows *= q.extent(d);
  }
  r.src_base = offset_in(src_box, q.lo, ss) * e;
  r.dst_base = offset_in(dst_box, q.lo, ds) * e;
  return r;
}

void copy_box(const vps::Box& q, const std::byte* src, const vps::Box& src_box, std::byte* dst, const vps::Box& dst_box,
              std::size_t elem, const MemoryOps& ops) {
  if (q.empty()) return;
  const StridedRuns r = strided_runs(q, src_box, dst_box, elem);
  if (r.rows == 1)
    ops.copy(dst + r.dst_base, src + r.src_base, static_cast<std::size_t>(r.run_bytes));
  else
    ops.copy_strided(dst, src, r);
}

std::size_t pack_range(const vps::Box& piece, std::int64_t begin, std::int64_t end, const std::byte* seg,
                       const vps::Box& seg_box, std::byte* out, std::size_t elem, const MemoryOps& ops) {
  if (begin == 0 && end == piece.numel()) {
    copy_box(piece, seg, seg_box, out, piece, elem, ops);
    return static_cast<std::size_t>(end - begin) * elem;
  }
  thread_local std::vector<vps::Box> boxes;
  boxes.clear();
  vps::flat_range_boxes(piece, begin, end, boxes);
  std::byte* at = out;
  for (const auto& q : boxes) {
    copy_box(q, seg, seg_box, at, q, elem, ops);
    at += static_cast<std::size_t>(q.numel()) * elem;
  }
  return static_cast<std::size_t>(at - out);
}

std::size_t unpack_range(const vps::Box& piece, std::int64_t begin, std::int64_t end, const std::byte* in,
                         std::byte* seg, const vps::Box& seg_box, std::size_t elem, const MemoryOps& ops) {
  if (begin == 0 && end == piece.numel()) {
    copy_box(piece, in, piece, seg, seg_box, elem, ops);
    return static_cast<std::size_t>(end - begin) * elem;
  }
  thread_local std::vector<vps::Box> boxes;
  boxes.clear();
  vps::flat_range_boxes(piece, begin, end, boxes);
  const std::byte* at = in;
  for (const auto& q : boxes) {
    copy_box(q, at, q, seg, seg_box, elem, ops);
    at += static_cast<std::size_t>(q.numel()) * elem;
  }
  return static_cast<std::size_t>(at - in);
}

std::int64_t contiguous_offset(const vps::Box& piece, std::int64_t begin, std::int64_t end, const vps::Box& seg_box) {
  if (begin >= end) return -1;
  // Elements of `piece` appear in the same relative order in `seg_box`'s storage, so the run is
  // contiguous exactly when first and last are (end - begin - 1) apart.
  const std::int64_t first = seg_box.linear_index(piece.coord_at(begin));
  const std::int64_t last = seg_box.linear_index(piece.coord_at(end - 1));
  return last - first == end - begin - 1 ? first : -1;
}

}  // namespace dynatrain::exec
