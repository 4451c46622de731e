// The processes of one attempt of a supervised job (job/supervisor.h) and what is left of them.
//
// The supervisor starts the attempt's mpirun as its child and is the reaper of its orphans
// (PR_SET_CHILD_SUBREAPER): when mpirun dies first (SIGKILL, a crash), its workers are
// reparented to the supervisor instead of init, so it can end them. Invariant: no process of
// an attempt runs once end_attempt_orphans has returned, so a restart never shares the memory
// copy, --save, the CSV or the job directory with workers of the attempt before it.
// mpirun gets SIGTERM when the supervisor dies (PR_SET_PDEATHSIG): a SIGKILLed supervisor
// leaves no job running (mpirun forwards the SIGTERM: a notice to every process, docs/reliability.md).
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace dynatrain::job {

// Makes this process the reaper of its descendants' orphans. Throws InputError when the kernel refuses.
void become_subreaper();

// In a child between fork and exec: SIGTERM when the parent (pid `parent`) dies; _exit(2)
// with one line when it already has.
void terminate_with_parent(pid_t parent);

// After the attempt's mpirun has been reaped: reaps every child of this process that ends
// within `grace_s` (workers mpirun signaled as it ended, still exiting), then SIGKILLs and reaps
// those left (workers orphaned by mpirun's death, and their children in turn), waiting at most
// `deadline_s` for them to go. Returns the pids it had to kill (empty: none was left). Throws
// CommError naming the pids still running at the deadline (a process stuck in the kernel).
std::vector<pid_t> end_attempt_orphans(double deadline_s, double grace_s = 1.0);

}  // namespace dynatrain::job
