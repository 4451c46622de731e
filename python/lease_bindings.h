// The memory Python views: each native buffer is exported as a BufferLease, a Python object with
// the buffer protocol that holds the native Manager (so its pool outlives every view) and a pin
// on the buffer (so no later switch re-uses or unmaps it while a view exists, keep_alive.h).
// torch.frombuffer keeps the lease referenced by the tensor's storage, and so by every view
// derived from it.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "python/manager.h"

namespace dynatrain::python {

void bind_leases(pybind11::module_& m);
// A lease on buffer `i` of `manager`, or None for an empty buffer.
pybind11::object buffer_lease(const std::shared_ptr<Manager>& manager, std::size_t i);
// A lease on buffer `i` of the manager's held copy `c` (Manager::copies()), or None when absent.
pybind11::object copy_lease(const std::shared_ptr<Manager>& manager, std::size_t c, std::size_t i);

}  // namespace dynatrain::python
