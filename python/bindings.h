// What the extension's binding files share: module.cc (plans, the Manager) and
// elastic_bindings.cc (process-count changes). pybind11 only here and in those files.
#pragma once

#include <pybind11/pybind11.h>

#include "python/manager.h"

namespace dynatrain::python {

// A switch's statistics as the Python dict Manager.switch() returns (module.cc).
pybind11::dict stats_dict(const SwitchStats& s);
// dynatrain._native's functions for grow, shrink, vacate and join (elastic_bindings.cc).
void bind_elastic(pybind11::module_& m);

}  // namespace dynatrain::python
