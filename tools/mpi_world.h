// Runs a command body on the MPI world (initialising MPI for the duration). Works with or
// without mpirun: a plain start is a world of one rank.
#pragma once

#include <functional>

#include "comm/transport.h"

namespace dynatrain::tools {

// InputError thrown identically on every rank is re-thrown on rank 0 only (the CLI prints one
// line), other ranks return exit code 2 quietly.
int run_on_mpi_world(const std::function<int(comm::Transport&)>& body);

}  // namespace dynatrain::tools
