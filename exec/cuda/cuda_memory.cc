#include "exec/cuda/cuda_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "common/error.h"
#include "exec/cuda/strided_copy.h"

namespace dynatrain::exec::cuda {
namespace {
void check(cudaError_t e, const char* what) { check_cuda(e, "exec/cuda", what); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaMemPool_t as_pool(void* p) { return static_cast<cudaMemPool_t>(p); }
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

CudaMemory::CudaMemory(int device) : device_(device) {
  const int n = device_count();
  if (device < 0 || device >= n)
    DT_INPUT_ERROR("CUDA device ", device, " does not exist; valid devices: ",
                   n == 0 ? std::string("none (no CUDA device or driver)") : "0.." + std::to_string(n - 1));
  use_device();
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  pool_ = pool;
  std::uint64_t keep_all = UINT64_MAX;  // released memory stays cached in the pool
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all),
        "cudaMemPoolSetAttribute(release threshold)");
}

CudaMemory::~CudaMemory() {
  // No throwing here: a failed device is reported by the calls that used it.
  (void)cudaSetDevice(device_);
  for (auto& [p, n] : blocks_) (void)cudaFreeAsync(p, as_stream(stream_));
  (void)cudaStreamSynchronize(as_stream(stream_));
  (void)cudaMemPoolDestroy(as_pool(pool_));
  (void)cudaStreamDestroy(as_stream(stream_));
  (void)cudaGetLastError();
}

void CudaMemory::use_device() const {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device_) check(cudaSetDevice(device_), "cudaSetDevice");
}

std::byte* CudaMemory::allocate(std::size_t bytes) {
  DT_CHECK(bytes > 0, "allocate of 0 bytes");
  use_device();
  void* p = nullptr;
  check(cudaMallocFromPoolAsync(&p, bytes, as_pool(pool_), as_stream(stream_)), "cudaMallocFromPoolAsync");
  std::lock_guard lock(mu_);
  blocks_.emplace(static_cast<std::byte*>(p), bytes);
  live_ += bytes;
  peak_live_ = std::max(peak_live_, live_);
  return static_cast<std::byte*>(p);
}

void CudaMemory::release(std::byte* data, std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    auto it = blocks_.find(data);
    DT_CHECK(it != blocks_.end(), "release of a pointer this CUDA memory did not hand out");
    DT_CHECK_EQ(it->second, bytes);
    blocks_.erase(it);
    live_ -= bytes;
  }
  use_device();
  check(cudaFreeAsync(data, as_stream(stream_)), "cudaFreeAsync");
}

void CudaMemory::copy(std::byte* dst, const std::byte* src, std::size_t bytes) const {
  if (bytes == 0) return;
  use_device();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream_)), "cudaMemcpyAsync");
}

void CudaMemory::zero(std::byte* dst, std::size_t bytes) const {
  if (bytes == 0) return;
  use_device();
  check(cudaMemsetAsync(dst, 0, bytes, as_stream(stream_)), "cudaMemsetAsync");
}

void CudaMemory::copy_strided(std::byte* dst, const std::byte* src, const StridedRuns& runs) const {
  use_device();
  check(launch_strided_copy(dst, src, runs, as_stream(stream_)), "the strided copy kernel's launch");
}

void CudaMemory::synchronize() const {
  use_device();
  check(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
}

void CudaMemory::trim() {
  synchronize();
  check(cudaMemPoolTrimTo(as_pool(pool_), 0), "cudaMemPoolTrimTo");
}

std::size_t CudaMemory::live_bytes() const {
  std::lock_guard lock(mu_);
  return live_;
}
std::size_t CudaMemory::peak_live() const {
  std::lock_guard lock(mu_);
  return peak_live_;
}
void CudaMemory::reset_peaks() {
  std::lock_guard lock(mu_);
  peak_live_ = live_;
}

}  // namespace dynatrain::exec::cuda
