// The device side of MemoryOps::copy_strided: one kernel launch that moves every row of a
// StridedRuns (exec/box_index.h) between two device storages, ordered on `stream`.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "exec/box_index.h"

namespace dynatrain::exec::cuda {

// Enqueues the copy of `runs` from storage `src` to storage `dst` (device pointers, or any
// pointers the device can read / write) on `stream`; returns the launch's error (cudaSuccess
// when enqueued). Rows of at least a block of units go row by row (one block per row at a time,
// its threads over the row); shorter rows go unit by unit over the whole copy.
cudaError_t launch_strided_copy(std::byte* dst, const std::byte* src, const StridedRuns& runs, cudaStream_t stream);

}  // namespace dynatrain::exec::cuda
