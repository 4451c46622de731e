// The Manager's world over a torch.distributed process group (c10d_bindings.cc): what module.cc
// needs to know of it, torch-free.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "comm/transport.h"

namespace dynatrain::python {

// dynatrain._native.c10d_world() / has_c10d() (c10d_bindings.cc).
void bind_c10d(pybind11::module_& m);

// A transport built by c10d_world(), held until a Manager takes it (a Manager owns its first
// world). `transport` is null once taken.
struct PendingWorld {
  std::unique_ptr<comm::Transport> transport;
};

// The transport of `world` for a Manager's constructor; InputError when it was taken already.
std::unique_ptr<comm::Transport> take_world(PendingWorld& world);

}  // namespace dynatrain::python
