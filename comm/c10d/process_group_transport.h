// comm::Transport over a c10d ProcessGroup the caller already holds (includes torch headers:
// only the c10d backend's own files and torch-side callers include this).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>

#include "comm/c10d/c10d_transport.h"

namespace dynatrain::comm {

// A transport over `group` (any c10d ProcessGroup with send, recv, broadcast, allreduce,
// allgather and barrier on CPU tensors). split() builds Gloo groups over `store` under keys
// that start with `prefix` (unique per group built on that store); `options` gives the timeout
// and the bind address of those groups.
std::unique_ptr<Transport> process_group_transport(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   c10::intrusive_ptr<c10d::Store> store, std::string prefix,
                                                   const C10dOptions& options);

// A Gloo process group of `rank` of `size` over `store` (rendezvous through it).
c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                  const C10dOptions& options);

}  // namespace dynatrain::comm
