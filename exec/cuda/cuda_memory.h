// CudaMemory: state memory on one CUDA device behind the engine's memory seam (exec/memory_ops.h,
// exec/engine.h's StateAllocator). Nothing here includes CUDA headers: users need only this file.
//
//   allocate / release  a caching pool: stream-ordered cudaMallocFromPoolAsync / cudaFreeAsync
//                       from a memory pool of its own whose release threshold is unlimited, so a
//                       released block's memory stays with the pool and the next allocation of
//                       any size reuses it without a device synchronisation; trim() gives it back.
//   copy / zero         cudaMemcpyAsync (cudaMemcpyDefault: device, host or peer pointers) and
//                       cudaMemsetAsync on the memory's stream.
//   copy_strided        one kernel (exec/cuda/strided_copy.cu) per strided box copy, with the
//                       index math shared with the host copy (exec/box_index.h).
//
// Ordering: every operation is enqueued on the memory's one stream, in call order; none waits
// for the device. Whatever reads or writes the memory outside that stream (the host, a transport
// on another stream) must call synchronize() first, or order itself after stream() (comm/nccl
// takes this stream for its transfers).
// Page-wise memory and remapped keeps are not offered (StateAllocator defaults): the engine then
// keeps whole-buffer behaviour and copies kept runs instead of remapping them.
// Thread-safe (one mutex for the accounting); the engine calls it from one thread per rank.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "exec/engine.h"

namespace dynatrain::exec::cuda {

// The number of CUDA devices this process can use; 0 when there is no driver, no device, or the
// runtime cannot start. Never throws.
int device_count();

class CudaMemory final : public StateAllocator {
 public:
  // Creates the stream and the pool on `device`. Throws InputError for a device outside
  // [0, device_count()), CommError when CUDA fails.
  explicit CudaMemory(int device = 0);
  ~CudaMemory() override;
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;

  // Device memory, usable by work ordered after this call on stream(). Throws InvariantError for
  // bytes == 0, std::bad_alloc when the device is out of memory.
  std::byte* allocate(std::size_t bytes) override;
  // `bytes` must be the size passed to allocate (InvariantError otherwise, or for a pointer this
  // memory did not hand out). Stream-ordered: work already enqueued may still use it.
  void release(std::byte* data, std::size_t bytes) override;
  bool can_adopt() const override { return true; }

  void copy(std::byte* dst, const std::byte* src, std::size_t bytes) const override;
  void zero(std::byte* dst, std::size_t bytes) const override;
  void copy_strided(std::byte* dst, const std::byte* src, const StridedRuns& runs) const override;

  // Blocks until every operation enqueued so far has finished; throws CommError if one failed.
  void synchronize() const;
  // The cudaStream_t every operation is ordered on.
  void* stream() const { return stream_; }
  int device() const { return device_; }

  // Gives the pool's cached, unused memory back to the device (after a synchronize()).
  void trim();
  std::size_t live_bytes() const;
  std::size_t peak_live() const;
  void reset_peaks();

 private:
  void use_device() const;

  int device_ = 0;
  void* stream_ = nullptr;  // cudaStream_t
  void* pool_ = nullptr;    // cudaMemPool_t
  mutable std::mutex mu_;
  std::map<std::byte*, std::size_t> blocks_;
  std::size_t live_ = 0, peak_live_ = 0;
};

}  // namespace dynatrain::exec::cuda
