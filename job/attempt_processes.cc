#include "job/attempt_processes.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "job/proc_stat.h"

namespace dynatrain::job {

namespace {

// The parent pid of `pid` (-1 when it is gone or unreadable).
pid_t parent_of(pid_t pid) {
  ProcStat stat;
  return read_proc_stat(pid, stat) ? static_cast<pid_t>(stat.parent) : -1;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && pid > 0 && parent_of(static_cast<pid_t>(pid)) == parent) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

std::string pid_list(const std::vector<pid_t>& pids) {
  std::string s;
  for (pid_t p : pids) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

}  // namespace

void become_subreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    DT_INPUT_ERROR("cannot become the reaper of the job's processes (prctl PR_SET_CHILD_SUBREAPER): ",
                   std::strerror(errno));
}

void terminate_with_parent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) {  // the parent died before prctl: nobody would end this job
    std::fprintf(stderr, "dynatrain: error: the supervisor (pid %d) ended before its job started\n",
                 static_cast<int>(parent));
    _exit(2);
  }
}

std::vector<pid_t> end_attempt_orphans(double deadline_s, double grace_s) {
  auto t0 = Clock::now();
  while (seconds_since(t0) < grace_s) {  // signaled by mpirun as it ended: let them finish exiting
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (children_of(getpid()).empty()) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  t0 = Clock::now();
  std::vector<pid_t> ended;
  for (;;) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {  // reap what has exited (zombies are children too)
    }
    const std::vector<pid_t> left = children_of(getpid());
    if (left.empty()) return ended;
    for (pid_t p : left) {
      if (kill(p, SIGKILL) == 0 && std::find(ended.begin(), ended.end(), p) == ended.end()) ended.push_back(p);
    }
    if (seconds_since(t0) > deadline_s)
      throw CommError(detail::concat("processes ", pid_list(left), " of the failed attempt still run ", deadline_s,
                                     " s after SIGKILL; no restart while they may write the job's files"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dynatrain::job
