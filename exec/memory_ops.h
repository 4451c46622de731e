// The device seam for state memory: every byte the engine copies or zeroes in state or staging
// goes through a MemoryOps (exec::StateAllocator is one), so host memory is one implementation
// and a device one (exec/cuda/: CUDA copies and kernels on a stream) is another, without touching
// the engine.
#pragma once

#include <cstddef>
#include <cstring>

#include "exec/box_index.h"

namespace dynatrain::exec {

class MemoryOps {
 public:
  virtual ~MemoryOps() = default;
  // Copies `bytes` from `src` to `dst` (no overlap). Host: memcpy.
  virtual void copy(std::byte* dst, const std::byte* src, std::size_t bytes) const { std::memcpy(dst, src, bytes); }
  // Copies every row of `runs` (exec/box_index.h) from `src` to `dst` (storage starts): a strided
  // box copy in one call. Host: one copy() per row; a device launches one kernel.
  virtual void copy_strided(std::byte* dst, const std::byte* src, const StridedRuns& runs) const {
    const std::size_t n = static_cast<std::size_t>(runs.run_bytes);
    RowCursor row(runs);
    do copy(dst + row.dst, src + row.src, n);
    while (row.next());
  }
  // Sets `bytes` at `dst` to zero. Host: memset.
  virtual void zero(std::byte* dst, std::size_t bytes) const { std::memset(dst, 0, bytes); }
};

// Host memory: memcpy / memset.
inline const MemoryOps& host_memory() {
  static const MemoryOps ops;
  return ops;
}

}  // namespace dynatrain::exec
