// How exec/cuda turns a failed CUDA call into the project's errors (docs/errors.md): running out
// of device memory is std::bad_alloc (as for host memory); any other failure of the runtime or
// driver is a CommError naming the call and CUDA's own message (the device context may then be
// unusable, as a failed communicator is).
#pragma once

#include <cuda_runtime_api.h>

namespace dynatrain::exec::cuda {

// Throws unless `e` is cudaSuccess; `what` names the call and its arguments.
void check_cuda(cudaError_t e, const char* what);

}  // namespace dynatrain::exec::cuda
