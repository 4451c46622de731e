#include "exec/cuda/cuda_error.h"

#include <new>
#include <string>

#include "common/error.h"

namespace dynatrain::exec::cuda {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so later calls see a clean state
    throw std::bad_alloc();
  }
  throw CommError(std::string("exec/cuda: ") + what + " failed: " + cudaGetErrorName(e) + " (" +
                  cudaGetErrorString(e) + ")");
}

}  // namespace dynatrain::exec::cuda
