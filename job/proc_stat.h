// One process's line of /proc/PID/stat, as the job runtime reads it: whether the process is gone,
// whether a signal is ending it, who its parent is, when it started.
//
// A process killed by a signal is a zombie only once the kernel has freed its memory: about
// 0.1 s for a process holding 2 GB, while its exit code (with the signal) is in /proc/PID/stat
// from the moment its exit begins (Linux >= 3.5, field 52; the PF_EXITING flag with it). So
// killed_by() tells a lost process before waitpid() or a peer's connection can.
//
// Async-signal-safe: no allocation, only open / read / close (the failure path reads it in a
// signal handler). Torch-free.
#pragma once

namespace dynatrain::job {

struct ProcStat {
  char state = '?';                    // R, S, D, T, Z (zombie: ended, not reaped), X (dead), ...
  long parent = -1;                    // the parent's pid
  unsigned long flags = 0;             // the kernel's PF_* flags
  int exit_code = 0;                   // as waitpid() reports it; 0 until the exit begins (or unreadable to us)
  unsigned long long start_ticks = 0;  // when it started, in clock ticks since boot: with the pid,
                                       // names one process (a pid is reused, a start time is not)

  // Whether it has ended: a zombie or dead process, which holds nothing.
  bool ended() const { return state == 'Z' || state == 'X'; }
  // Whether it has ended or its exit has begun (however: a signal, exit()): it will not act again.
  bool leaving() const;
  // The signal that is ending it or ended it (as WTERMSIG), 0 when none: not exiting, exiting
  // with a status (exit(), a notice's vacate), or stopped.
  int killed_by() const;
};

// Reads /proc/PID/stat into `out`; false when the process is gone (reaped) or its line cannot
// be read.
bool read_proc_stat(long pid, ProcStat& out);

}  // namespace dynatrain::job
