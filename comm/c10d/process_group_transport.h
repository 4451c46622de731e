// comm::Transport over a c10d ProcessGroup the caller already holds (includes torch headers:
// only the c10d backend's own files and torch-side callers include this).
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <set>
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

// The parts of a transport of this backend: `store` is null when `t` is another backend's.
struct C10dParts {
  c10::intrusive_ptr<c10d::Store> store;
  C10dOptions options;
  int rank = 0;
  std::string prefix;  // the store keys of its group: the same on every member, unique to it
};
C10dParts c10d_parts(const Transport& t);

// While alive, records the sockets this process opens as the connections of a Gloo group
// (c10d_recovery.h, abandon_c10d_groups): made around every group's construction.
class GroupSockets {
 public:
  GroupSockets();
  ~GroupSockets();
  GroupSockets(const GroupSockets&) = delete;
  GroupSockets& operator=(const GroupSockets&) = delete;

 private:
  std::set<unsigned long> before_;  // socket inodes open when the group's construction began
};

}  // namespace dynatrain::comm
