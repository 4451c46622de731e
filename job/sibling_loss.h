// A launcher tells its other processes at once that one of them was killed.
//
// A process of a job on torch.distributed that is killed mid-step is met by the survivors only
// at their next collective with it: at the end of a forward and backward (seconds at GB scale).
// Its launcher (`dynatrain launch --keep-going`, tools/launch_command.cc) learns within its poll
// (5 ms), as the killed process's exit begins (job/proc_stat.h). So the launcher gives each process it starts the read end of a pipe of its own
// (its number in DYNATRAIN_LAUNCH_FD) and, when a process is killed, writes "PID\n" into every
// other one's pipe. A process's loss watch (job/loss_watch.h) reads the pipe, and when the pid
// is one of the watched world's processes on this node it raises that world's loss mark, which
// stops every survivor's step, on every node, as if a survivor had met the loss.
//
//   launcher:  SiblingPipe pipe = SiblingPipe::open();  fork();
//              child: pipe.pass_to_this_process(); exec ...   parent: pipe.keep_write_end();
//              a child killed: tell_siblings(pipes, pid)
//   process:   SiblingLossReader reader;  ...  for (long pid : reader.read_reported()) ...
//
// Invariants: a write never blocks the launcher nor kills it (the write ends are non-blocking and
// SIGPIPE is ignored: a process that closed its end, or does not read it, costs nothing); each
// process holds only its own read end (both ends are close-on-exec but the child's own read end).
// Torch-free.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace dynatrain::job {

// The environment variable that names the inherited read end.
inline constexpr const char* kSiblingLossFdVariable = "DYNATRAIN_LAUNCH_FD";

// Launcher side: the pipe of one process it starts.
class SiblingPipe {
 public:
  // Both ends close-on-exec, the write end non-blocking. CommError when the system has no pipe.
  static SiblingPipe open();
  // In the child after fork, before exec: keeps its read end across exec and names it in
  // DYNATRAIN_LAUNCH_FD; closes the write end.
  void pass_to_this_process() const;
  // In the launcher after fork: closes the read end (no later child inherits it); returns the
  // write end, which the launcher owns from now on.
  int keep_write_end();

 private:
  int read_ = -1, write_ = -1;
};

// Writes "PID\n" into each write end (-1: skipped). Never blocks, never raises; ignores SIGPIPE
// for the whole launcher once.
void tell_siblings(const std::vector<int>& write_ends, pid_t lost);

// Process side: the pids the launcher reported killed, from the inherited pipe.
class SiblingLossReader {
 public:
  // Takes the fd DYNATRAIN_LAUNCH_FD names (made non-blocking); none when unset or not a pipe.
  SiblingLossReader();
  // An explicit fd (tests); -1: none.
  explicit SiblingLossReader(int fd);
  SiblingLossReader(const SiblingLossReader&) = delete;
  SiblingLossReader& operator=(const SiblingLossReader&) = delete;

  bool present() const { return fd_ >= 0; }
  int fd() const { return fd_; }  // to wait on (poll); -1 when none
  // The pids reported since the last call, without waiting; empty when none (or no pipe). A
  // closed pipe (the launcher is gone) reads as nothing, from then on.
  std::vector<long> read_reported();

 private:
  int fd_ = -1;
  std::string partial_;  // a line not ended yet
};

}  // namespace dynatrain::job
