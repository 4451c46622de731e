// Launcher over MPI dynamic processes (Open MPI 4.1).
//
//   grow   MPI_Comm_spawn of /proc/self/exe with this process's own arguments
//          (/proc/self/cmdline), `count` processes as one new job, then MPI_Intercomm_merge
//          (starters low, new processes high) -> one intracommunicator over both jobs. Hosts:
//          the MPI_Info key "hostfile" / "host" from the settings below, else Open MPI's
//          default mapping (the local node, oversubscribed when mpirun allows it).
//   join   in a spawned process: MPI_Comm_get_parent, the same merge, parent disconnected.
//   leave  flushes stdio and _exit(0) without MPI_Finalize. MPI_Finalize would block until every
//          process of the same job finalizes (design.md §4); Open MPI lets a process end
//          without it when mpirun runs with OMPI_MCA_orte_allowed_exit_without_sync=1 (the
//          rest of the job goes on), which cannot_leave() checks.
//
// A failed spawn (missing executable, no slots) aborts the whole Open MPI job rather than
// returning an error, so cannot_start() checks what can be checked first: the executable
// exists and is executable, and a host list, when given, is not empty.
#pragma once

#include <memory>
#include <string>

#include "edm/launcher.h"

namespace dynatrain::edm {

struct MpiLaunchSettings {
  std::string executable;  // empty: /proc/self/exe (tests point it elsewhere to see a refusal)
  std::string hostfile;    // MPI_Info "hostfile" for the new processes; empty: none
  std::string hosts;       // MPI_Info "host" ("n1,n2"); empty: none
};

std::unique_ptr<Launcher> make_mpi_launcher(MpiLaunchSettings settings = {});

}  // namespace dynatrain::edm
