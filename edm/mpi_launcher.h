// Launcher over MPI dynamic processes (Open MPI 4.1).
//
//   grow   world rank 0 alone spawns /proc/self/exe with this process's own arguments
//          (/proc/self/cmdline), `count` processes as one new job, opens a port and sends it to
//          them; every old rank learns the outcome by broadcast, then MPI_Comm_accept (old
//          world) / MPI_Comm_connect (new job) and MPI_Intercomm_merge (starters low, new
//          processes high) -> one intracommunicator over both jobs. Hosts: the settings below
//          as MPI_Info "add-host" + "host" / "add-hostfile" + "hostfile" (they join the job's
//          allocation: mpirun need not have been given them), else Open MPI's default mapping
//          (the local node, oversubscribed when mpirun allows it).
//   join   in a spawned process: the port from the parent, MPI_Comm_connect, the same merge.
//   leave  flushes stdio and _exit(0) without MPI_Finalize. MPI_Finalize would block until every
//          process of the same job finalizes (design.md §4); Open MPI lets a process end
//          without it when mpirun runs with OMPI_MCA_orte_allowed_exit_without_sync=1 (the
//          rest of the job goes on), which cannot_leave() checks.
//
// What ends or breaks the job, cannot_start() checks first, on rank 0: the executable exists
// and is executable (Open MPI aborts the job otherwise), every host of --host and of a
// readable --hostfile resolves (its ssh launch would fail and end the job), and without new
// hosts and without --oversubscribe the job's slots (MPI_UNIVERSE_SIZE) hold the new processes.
// A spawn that still fails inside MPI (MPI_ERR_SPAWN, e.g. more processes than a given host's
// slots) is broadcast by rank 0 and thrown as LaunchRefused on every rank alike: the switch is
// refused and training goes on. (A collective spawn would not do: in Open MPI 4.1 it never
// returns on the other ranks when it fails at its root.) Open MPI 4.1's mpirun then never
// exits by itself, so the job ends through end_after_failed_start() (MPI_Abort, exit 1).
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
