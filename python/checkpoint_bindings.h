// The checkpoint half of dynatrain._native (python/checkpoint_bindings.cc): ckpt/ for a Manager.
#pragma once

#include <pybind11/pybind11.h>

namespace dynatrain::python {

// Adds the ckpt_* functions and the Checkpoint class to `m`; after bind_manager (they take a Manager).
void bind_checkpoint(pybind11::module_& m);

}  // namespace dynatrain::python
