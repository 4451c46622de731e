// Index math of a strided box copy, shared by the host copy (exec/box_copy.cc) and the device
// kernels (exec/cuda/): one header, no dependencies, every function usable on both sides.
//
// A copy of box Q between two dense row-major storages is a list of `rows` runs of `run_bytes`
// bytes each: the trailing dimensions that Q spans whole in both storages (plus the last one it
// does not) form one contiguous run, and the leading `row_dims` dimensions enumerate the runs in
// row-major order. Row r starts at byte `src_base + sum_d i_d * src_stride[d]` of the source and
// `dst_base + sum_d i_d * dst_stride[d]` of the destination, where (i_0 .. i_{row_dims-1}) is r
// written in the mixed radix `extent`. Invariants (exec::strided_runs builds them):
//   rows = prod extent[d] over d < row_dims (1 when row_dims == 0); every extent >= 1;
//   run_bytes >= 1; no two rows overlap in either storage.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DT_HOST_DEVICE __host__ __device__
#else
#define DT_HOST_DEVICE
#endif

namespace dynatrain::exec {

inline constexpr int kIndexMaxDims = 4;  // = vps::kMaxDims (checked in box_copy.cc)

struct StridedRuns {
  int row_dims = 0;                             // in [0, kIndexMaxDims - 1]
  std::int64_t extent[kIndexMaxDims] = {};      // rows along dims [0, row_dims)
  std::int64_t src_stride[kIndexMaxDims] = {};  // bytes between rows along dim d, source
  std::int64_t dst_stride[kIndexMaxDims] = {};  // the same in the destination
  std::int64_t src_base = 0, dst_base = 0;      // bytes to row 0 from each storage's start
  std::int64_t run_bytes = 0;
  std::int64_t rows = 0;
};

// Byte offsets of row `row` (in [0, rows)) in the source and destination storage: random
// access, what a kernel thread computes for the row it copies.
DT_HOST_DEVICE inline void row_offsets(const StridedRuns& c, std::int64_t row, std::int64_t& src, std::int64_t& dst) {
  src = c.src_base;
  dst = c.dst_base;
  for (int d = c.row_dims - 1; d >= 0; --d) {
    const std::int64_t i = row % c.extent[d];
    row /= c.extent[d];
    src += i * c.src_stride[d];
    dst += i * c.dst_stride[d];
  }
}

// Walks the rows in order with one add per row (no division): what the host loop uses. After
// construction it stands at row 0; next() moves to the following row and returns false after
// the last. Agrees with row_offsets row by row (tests/exec/box_index_test.cc).
struct RowCursor {
  const StridedRuns* c;
  std::int64_t idx[kIndexMaxDims] = {};
  std::int64_t src, dst;

  DT_HOST_DEVICE explicit RowCursor(const StridedRuns& runs) : c(&runs), src(runs.src_base), dst(runs.dst_base) {}
  DT_HOST_DEVICE bool next() {
    for (int d = c->row_dims - 1; d >= 0; --d) {
      src += c->src_stride[d];
      dst += c->dst_stride[d];
      if (++idx[d] < c->extent[d]) return true;
      src -= idx[d] * c->src_stride[d];
      dst -= idx[d] * c->dst_stride[d];
      idx[d] = 0;
    }
    return false;
  }
};

// The widest unit (16, 8, 4, 2 or 1 bytes) that divides the run length, every stride and both
// bases plus the given pointer addresses: a kernel moves whole units of this width.
DT_HOST_DEVICE inline int copy_unit_bytes(const StridedRuns& c, std::uint64_t src_addr, std::uint64_t dst_addr) {
  std::uint64_t bits = static_cast<std::uint64_t>(c.run_bytes) | (src_addr + static_cast<std::uint64_t>(c.src_base)) |
                       (dst_addr + static_cast<std::uint64_t>(c.dst_base));
  for (int d = 0; d < c.row_dims; ++d)
    bits |= static_cast<std::uint64_t>(c.src_stride[d]) | static_cast<std::uint64_t>(c.dst_stride[d]);
  int unit = 16;
  while (unit > 1 && (bits & static_cast<std::uint64_t>(unit - 1)) != 0) unit /= 2;
  return unit;
}

// Byte offsets of unit `u` (in [0, rows * run_bytes / unit)) of a copy in units of `unit` bytes
// (copy_unit_bytes): unit u is unit u % (run_bytes / unit) of row u / (run_bytes / unit). The
// device kernel's whole index map; consecutive u are consecutive bytes of a row (coalesced).
DT_HOST_DEVICE inline void unit_offsets(const StridedRuns& c, std::int64_t u, int unit, std::int64_t& src,
                                        std::int64_t& dst) {
  const std::int64_t per_row = c.run_bytes / unit;
  row_offsets(c, u / per_row, src, dst);
  const std::int64_t at = (u % per_row) * unit;
  src += at;
  dst += at;
}

}  // namespace dynatrain::exec
