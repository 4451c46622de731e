// Strided box copies: the only place where bytes of a box are moved element by element.
//
// Storage convention (vps/layout.h): a box G of one tensor stored dense row-major, its first
// element at a byte pointer. A box Q inside G is then strided; copy_box moves Q from one such
// storage to another. Packing is the special case where the destination storage is Q itself
// (dense, contiguous); unpacking the case where the source storage is Q.
//
// Fast path: trailing dimensions where Q spans the whole extent of both storages are folded
// into one contiguous run, and each run is one memcpy; a Q that is contiguous in both storages
// is a single memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "exec/box_index.h"
#include "exec/memory_ops.h"
#include "vps/box.h"

namespace dynatrain::exec {

// The runs (exec/box_index.h) that copy box `q` from the storage of `src_box` to the storage of
// `dst_box`, `elem` bytes an element; `q` must lie inside both (checked) and not be empty.
StridedRuns strided_runs(const vps::Box& q, const vps::Box& src_box, const vps::Box& dst_box, std::size_t elem);

// Copies box `q` from storage of box `src_box` at `src` to storage of box `dst_box` at `dst`.
// `q` must lie inside both boxes (checked); `elem` is the element size in bytes. The runs are
// moved by `ops` (all three functions): one copy() when contiguous, else one copy_strided().
void copy_box(const vps::Box& q, const std::byte* src, const vps::Box& src_box, std::byte* dst, const vps::Box& dst_box,
              std::size_t elem, const MemoryOps& ops = host_memory());

// Packs the row-major elements [begin, end) of box `piece` (stored inside `seg_box` at `seg`)
// into `out`, contiguously. Returns the bytes written ((end - begin) * elem).
std::size_t pack_range(const vps::Box& piece, std::int64_t begin, std::int64_t end, const std::byte* seg,
                       const vps::Box& seg_box, std::byte* out, std::size_t elem, const MemoryOps& ops = host_memory());
// The inverse of pack_range: writes contiguous `in` into the elements [begin, end) of `piece`
// inside `seg_box` at `seg`. Returns the bytes read.
std::size_t unpack_range(const vps::Box& piece, std::int64_t begin, std::int64_t end, const std::byte* in,
                         std::byte* seg, const vps::Box& seg_box, std::size_t elem,
                         const MemoryOps& ops = host_memory());

// When the elements [begin, end) of `piece` form one contiguous run in the storage of
// `seg_box`, returns the element offset of the run's first element in that storage; else -1.
std::int64_t contiguous_offset(const vps::Box& piece, std::int64_t begin, std::int64_t end, const vps::Box& seg_box);

// Calls fn(offset, count) for each contiguous run of the row-major elements [begin, end) of
// `piece` in the storage of `seg_box`, in order: `offset` is the run's first element in that
// storage, `count` its length in elements. What the copies above touch, without touching it.
template <typename Fn>
void for_each_run(const vps::Box& piece, std::int64_t begin, std::int64_t end, const vps::Box& seg_box, Fn&& fn) {
  thread_local std::vector<vps::Box> boxes;
  boxes.clear();
  vps::flat_range_boxes(piece, begin, end, boxes);
  for (const vps::Box& q : boxes) {
    const int nd = q.ndim;
    int m = nd;  // dims [m, nd) are full in the storage: folded into the run
    while (m > 0 && q.extent(m - 1) == seg_box.extent(m - 1)) --m;
    const int run_dim = m > 0 ? m - 1 : 0;
    std::int64_t run = 1;
    for (int d = run_dim; d < nd; ++d) run *= q.extent(d);
    std::int64_t idx[vps::kMaxDims] = {0, 0, 0, 0};
    vps::Coord c = q.lo;
    for (;;) {
      for (int d = 0; d < run_dim; ++d) c[d] = q.lo[d] + idx[d];
      fn(seg_box.linear_index(c), run);
      int d = run_dim - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < q.extent(d)) break;
        idx[d] = 0;
      }
      if (d < 0) break;
    }
  }
}

}  // namespace dynatrain::exec
