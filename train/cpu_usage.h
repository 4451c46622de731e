#pragma once
// CPU time of the calling thread and of its whole process (getrusage), to tell where a pause's
// wall time went: a thread that waits in a spinning MPI call still burns CPU, one that the
// kernel took off its core for another runnable thread shows it in involuntary switches, and
// other threads of the process (MPI's, the watchdog's, torch's or OpenBLAS's pools) show as
// process CPU beyond the calling thread's.
#include <sys/resource.h>

#include <cstdint>

namespace dynatrain::train {

struct CpuUsage {
  double thread_s = 0;   // user + system CPU of the calling thread
  double process_s = 0;  // user + system CPU of every thread of the process
  std::int64_t involuntary_switches = 0;  // the calling thread's, since it started

  static CpuUsage now() {
    auto secs = [](const rusage& u) {
      return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    rusage t{}, p{};
    getrusage(RUSAGE_THREAD, &t);
    getrusage(RUSAGE_SELF, &p);
    return {secs(t), secs(p), static_cast<std::int64_t>(t.ru_nivcsw)};
  }
  // What happened between `before` and this snapshot.
  CpuUsage since(const CpuUsage& before) const {
    return {thread_s - before.thread_s, process_s - before.process_s,
            involuntary_switches - before.involuntary_switches};
  }
  double other_threads_s() const { return process_s - thread_s; }
};

}  // namespace dynatrain::train
