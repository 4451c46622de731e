// Test hook: kills or stops this process at a named point, so fault tests can hit a step, a
// switch or a phase of a checkpoint save on purpose (tests/reliability/fault_test.sh). Inert
// unless DT_FAULT is set.
//
//   DT_FAULT=ACTION:RANK:POINT:DELAY_MS[:SKIP][,ACTION:RANK:...]   e.g. kill:1:switch:50   stop:2:step:0
//     (several faults, comma-separated: each process fires the first that names its rank and point)
//     ACTION  kill (SIGKILL), lose (SIGKILL after removing the files this process wrote into
//             the state's memory copy, job/memory_copy.h: its node lost with it), stop (SIGSTOP: alive but silent, for the watchdog), notice
//             (SIGTERM to this process alone: a preemption notice, job/notice.h), throw (a
//             std::runtime_error on this rank only, at once: the other ranks are left waiting)
//             or nan (fault_point returns true: at POINT step, the step's loss reads NaN; at a
//             save phase, the rank's write fails as on a full disk, job/train_ckpt.h), or miss
//             (a CommError on this rank at once, as from a collective that met a lost peer: at
//             POINT barrier, with another process killed there, a barrier that completed on
//             some survivors and not on this one)
//     RANK    world rank that faults
//     POINT   switch (a layout switch starts), step (a training step starts), barrier (a
//             step's commit barrier completed, its update not applied: train on
//             torch.distributed with lost processes recovered, ZeRO 0), prepare (the
//             background prepare of the next switch starts, train only), notices (train with
//             notices on: a step boundary's agreement on notices starts), saved (train with
//             --save: a boundary's checkpoint is written, its memory copy not yet), copied (train with
//             --redundancy: the memory copy of a boundary is written, the step before it not yet
//             reported), join (a process
//             started by a grow has joined its starters' world, before the handshake that
//             follows; RANK: its rank in that world), or a phase of a checkpoint save
//             (ckpt/checkpoint.h, SavePhase): save-begin (before the rank file is written),
//             save-written (the rank file is written and fsync'd), save-index (rank 0: the
//             index is written, `latest` not yet switched)
//     DELAY_MS  how long after the point begins (a thread fires it while the work runs);
//             0 fires at once on the calling thread, so the point's work never starts
//     SKIP    the fault fires the (SKIP+1)-th time the point is reached on that rank (default 0)
// Once fired, later points are ignored.
// DT_FAULT_STAMP=FILE: the firing rank writes the Unix time (seconds) into FILE just before;
// when FILE already exists the fault does not fire (once per stamp: a job restarted by
// `train --max-restarts` with the same environment is not hit again).
#pragma once

namespace dynatrain::job {

// Returns true when a `nan` fault fired here; kill, stop and throw act themselves.
bool fault_point(const char* point, int rank);

}  // namespace dynatrain::job
