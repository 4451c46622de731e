// The strided box copy kernels. All index math is exec/box_index.h's (tested on the host by
// tests/exec/box_index_test.cc); this file only maps threads onto it.
#include "exec/cuda/strided_copy.h"

#include <algorithm>
#include <cstdint>

namespace dynatrain::exec::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 1 << 16;

// Unit u of the copy (unit_offsets), for u = thread index, grid-stride.
template <typename U>
__global__ void copy_units(std::byte* dst, const std::byte* src, StridedRuns runs, std::int64_t units) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += step) {
    std::int64_t s = 0, d = 0;
    unit_offsets(runs, u, static_cast<int>(sizeof(U)), s, d);
    *reinterpret_cast<U*>(dst + d) = *reinterpret_cast<const U*>(src + s);
  }
}

// Row r of the copy (row_offsets) for r = block index, grid-stride; the block's threads walk the
// row's units: unit k of row r is unit r * per_row + k of unit_offsets.
template <typename U>
__global__ void copy_rows(std::byte* dst, const std::byte* src, StridedRuns runs) {
  const std::int64_t per_row = runs.run_bytes / static_cast<std::int64_t>(sizeof(U));
  for (std::int64_t r = blockIdx.x; r < runs.rows; r += gridDim.x) {
    std::int64_t s = 0, d = 0;
    row_offsets(runs, r, s, d);
    U* out = reinterpret_cast<U*>(dst + d);
    const U* in = reinterpret_cast<const U*>(src + s);
    for (std::int64_t k = threadIdx.x; k < per_row; k += blockDim.x) out[k] = in[k];
  }
}

template <typename U>
cudaError_t launch(std::byte* dst, const std::byte* src, const StridedRuns& runs, cudaStream_t stream) {
  const std::int64_t per_row = runs.run_bytes / static_cast<std::int64_t>(sizeof(U));
  if (per_row >= kThreads) {
    const auto blocks = static_cast<unsigned>(std::min(runs.rows, kMaxBlocks));
    copy_rows<U><<<blocks, kThreads, 0, stream>>>(dst, src, runs);
  } else {
    const std::int64_t units = runs.rows * per_row;
    const auto blocks = static_cast<unsigned>(std::min((units + kThreads - 1) / kThreads, kMaxBlocks));
    copy_units<U><<<blocks, kThreads, 0, stream>>>(dst, src, runs, units);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_strided_copy(std::byte* dst, const std::byte* src, const StridedRuns& runs, cudaStream_t stream) {
  if (runs.rows == 0 || runs.run_bytes == 0) return cudaSuccess;
  switch (copy_unit_bytes(runs, reinterpret_cast<std::uint64_t>(src), reinterpret_cast<std::uint64_t>(dst))) {
    case 16: return launch<uint4>(dst, src, runs, stream);
    case 8: return launch<std::uint64_t>(dst, src, runs, stream);
    case 4: return launch<std::uint32_t>(dst, src, runs, stream);
    case 2: return launch<std::uint16_t>(dst, src, runs, stream);
    default: return launch<std::uint8_t>(dst, src, runs, stream);
  }
}

}  // namespace dynatrain::exec::cuda
