// The device seam for state memory: every byte the engine copies or zeroes in state or staging
// goes through a MemoryOps (exec::StateAllocator is one), so host memory is one implementation
// and a device one (CUDA copies on a stream) is another, without touching the engine.
#pragma once

#include <cstddef>
#include <cstring>

namespace dynatrain::exec {

class MemoryOps {
 public:
  virtual ~MemoryOps() = default;
  // Copies `bytes` from `src` to `dst` (no overlap). Host: memcpy.
  virtual void copy(std::byte* dst, const std::byte* src, std::size_t bytes) const {
    std::memcpy(dst, src, bytes);
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
