#pragma once
// CPU time of the calling thread and of its whole process (getrusage), and the time the thread
// was runnable but waited for a core (/proc/thread-self/schedstat), to tell where a pause's wall
// time went: on a core (a spinning MPI wait included), waiting for a core (other runnable
// threads on the machine), or neither: asleep (a blocking call, a lock, a page fault's I/O).
// Other threads of the process (MPI's, the watchdog's, torch's or OpenBLAS's pools) show as
// process CPU beyond the calling thread's.
#include <sys/resource.h>

#include <cstdint>
#include <fstream>

namespace dynatrain::train {

struct CpuUsage {
  double thread_s = 0;                    // user + system CPU of the calling thread
  double process_s = 0;                   // user + system CPU of every thread of the process
  std::int64_t involuntary_switches = 0;  // the calling thread's, since it started
  std::int64_t voluntary_switches = 0;    // the calling thread went to sleep (blocked)
  double runqueue_s = 0;                  // the calling thread was runnable but not on a core (0 if unknown)

  static CpuUsage now() {
    auto secs = [](const rusage& u) {
      return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    rusage t{}, p{};
    getrusage(RUSAGE_THREAD, &t);
    getrusage(RUSAGE_SELF, &p);
    double on_cpu_ns = 0, waiting_ns = 0;  // schedstat: "ns on a core, ns runnable waiting, slices"
    std::ifstream("/proc/thread-self/schedstat") >> on_cpu_ns >> waiting_ns;
    return {secs(t), secs(p), static_cast<std::int64_t>(t.ru_nivcsw), static_cast<std::int64_t>(t.ru_nvcsw),
            waiting_ns * 1e-9};
  }
  // What happened between `before` and this snapshot.
  CpuUsage since(const CpuUsage& before) const {
    return {thread_s - before.thread_s, process_s - before.process_s,
            involuntary_switches - before.involuntary_switches, voluntary_switches - before.voluntary_switches,
            runqueue_s - before.runqueue_s};
  }
  double other_threads_s() const { return process_s - thread_s; }
};

}  // namespace dynatrain::train
