// How the CUDA modules (exec/cuda/, comm/nccl/) turn a failed CUDA runtime call into the
// project's errors (docs/errors.md): running out of device memory is std::bad_alloc, as for host
// memory; any other failure is a CommError naming the module, the call and CUDA's own message
// (the device context may then be unusable, as a failed communicator is). Header-only, and
// included only by code built where CUDA is found (cmake/cuda.cmake).
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <string>

#include "common/error.h"

namespace dynatrain {

// Throws unless `e` is cudaSuccess; `module` and `what` name the caller and the call.
inline void check_cuda(cudaError_t e, const char* module, const char* what) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: later calls see a clean state
    throw std::bad_alloc();
  }
  throw CommError(std::string(module) + ": " + what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                  ")");
}

}  // namespace dynatrain
