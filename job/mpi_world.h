// Runs a command body on the MPI world (initialising MPI for the duration), and owns the job's
// one failure path. Works with or without mpirun: a plain start is a world of one rank.
//
// Failure contract (docs/errors.md, "Failure handling"): any failure on any rank ends the whole
// job within seconds with ONE line on stderr naming the rank and the cause, and a non-zero exit.
//  * An exception on a rank of a world of more than one: the rank prints
//    "dynatrain: error: rank R of N: <message>" (InputError, exit 2) or
//    "dynatrain: internal error: rank R of N: <message>" (anything else, exit 3) and calls
//    MPI_Abort, so peers never wait in a collective for it. Ranks other than 0 first wait a
//    grace period: an error every rank raises alike is then printed by rank 0 alone.
//  * SIGTERM / SIGINT / SIGHUP (mpirun forwards them; mpirun also sends SIGTERM to the
//    survivors when a rank dies): the first rank of the node to get one prints one line naming
//    the signal and any rank on this node whose process is gone, then exits 128 + signal.
//  * One line per job: ranks of one node claim the report through a marker file in Open MPI's
//    per-job session directory (mpirun removes it). A rank that loses the claim stays silent.
//  * Open MPI's own banners are suppressed (orte_execute_quiet, set in-process for the ranks'
//    messages and by scripts/mpi-env.sh for mpirun's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

int run_on_mpi_world(const std::function<int(comm::Transport&)>& body);

// A world the environment describes without mpirun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT:
// torchrun, `dynatrain launch`, a scheduler). The program registers the factory once at start
// (comm/c10d: c10d_world_from_env); it answers nullptr when the environment names no world.
// run_on_mpi_world then runs the body on that world when no mpirun started this process; a
// failure prints "dynatrain: error: rank R of N: <message>" (ranks other than 0 after the
// grace) and ends this process with the same exit codes (the launcher ends the others).
using EnvWorldFactory = std::unique_ptr<comm::Transport> (*)();
void set_env_world_factory(EnvWorldFactory factory);
// Whether the environment names a rank of a world started without mpirun (RANK, WORLD_SIZE).
bool environment_names_world();

// Whether process `pid` of this node has ended: /proc/PID missing, or a zombie or dead process
// not reaped yet (it holds nothing). Async-signal-safe (the failure path calls it in a handler).
bool process_gone(long pid);

// Collective over `world`, the job's world after a switch that changed its processes (a grow,
// a shrink): the failure path's lines name ranks of that world and watch its processes (a
// process started by a grow otherwise knows only the processes started with it). On a world
// that is not MPI's only the rank and size the lines name change (no collective).
void note_world_after_switch(comm::Transport& world);

// Rank 0 of a job started by a plain `mpirun -np N dynatrain train` (not by `train --np N`,
// which sets them), once at start: when `schedule` shrinks or grows the job (`requests`: it
// takes requests, which may do either) and mpirun's environment lacks what that needs
// (OMPI_MCA_orte_allowed_exit_without_sync=1 for processes that leave, PMIX_MCA_gds=hash for
// processes a grow starts), prints one line on stdout naming the variables and `dynatrain
// train --np N` as the fix. Silent in processes a grow started.
void note_mpirun_environment(const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule, bool requests);

// Ends the whole job from this rank: prints "dynatrain: <kind>: rank R of N: <message>" unless
// another rank of the node already reported, then MPI_Abort(exit_code). Safe from any thread.
[[noreturn]] void abort_job(const char* kind, const std::string& message, int exit_code);

// The failure path's signal handler (SIGTERM, SIGINT, SIGHUP): one line for the job naming the
// signal and any peer of this node whose process is gone, then _exit(128 + sig).
// Async-signal-safe, for handlers that take over a signal (job/notice.h).
[[noreturn]] void stop_on_signal(int sig);

// Async-signal-safe: whether a process of a peer rank on this node is gone (missing or a zombie).
bool peer_gone_on_this_node();

// True when this process is a rank other than 0 of an mpirun job (read from the environment, so
// it works before MPI starts): errors every rank raises alike before MPI starts, such as flag
// parsing, are printed by rank 0 only.
bool is_nonzero_mpi_rank();
// A rank other than 0 that fails before MPI starts with an error every rank raises alike calls
// this before exiting: it waits the same grace as the MPI failure path, so that mpirun does not
// end the job (rank 0 included) before rank 0 has printed the error.
void wait_for_root_report();

// A hash of this machine's host name: equal for ranks on one node, different across nodes
// (gethostid() is not: containers on different nodes often share it).
std::int64_t this_host_id();

}  // namespace dynatrain::job
