// Ends the job when a rank makes no progress in a phase that needs its peers (a switch): a peer
// that stops answering (stopped, livelocked, cut off) would otherwise leave every other rank
// waiting in MPI forever. Open MPI itself ends the job when a process dies; this covers peers
// that are alive but silent.
//
//   Watchdog dog;                                  // one thread per rank, idle until armed
//   dog.arm("switch tp=2 -> tp=4", switch_timeout_seconds(bytes));
//   ... run_transition(...) ...
//   dog.disarm();
//
// A phase that reports progress (arm's `progress`: a counter the work raises as it goes, e.g.
// exec::TransitionOptions::progress, the bytes a switch has moved) is slow, not hung, while the
// counter moves: at the deadline, a counter that moved since the last look starts a new period
// of `seconds`; only a period without any progress ends the job.
//
// On expiry: job::abort_job prints "dynatrain: error: rank R of N: no progress for T s during
// <phase>; <cause>" and aborts the MPI job (exit 3). The cause is "a peer stopped answering"
// unless arm() was given a function that names what the rank waits for (asked at expiry, on the
// watchdog's thread; e.g. processes that a grow started and that never joined).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dynatrain::job {

// The one watchdog setting of the CLI and the Python module (python/dynatrain/_watchdog.py):
// DT_WATCHDOG_S seconds, default 60, the floor of every deadline; 0 turns the watchdog off.
// DYNATRAIN_WATCHDOG_S, the Python module's former name, is read when DT_WATCHDOG_S is unset,
// and says once per process (on the first rank) that it is deprecated. InputError naming the
// variable and its value when that is not a number of seconds >= 0.
constexpr double kDefaultWatchdogSeconds = 60;
double watchdog_seconds();

// Deadline for moving `bytes` into or out of one rank: watchdog_seconds() plus the bytes at
// 50 MB/s, a rate far below any link this runs on (so a slow but working peer never trips it);
// infinite (no deadline) when the watchdog is off.
double switch_timeout_seconds(std::uint64_t bytes);

class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `cause`: called at expiry; an empty answer means "a peer stopped answering". An infinite
  // `seconds` (the watchdog off) arms nothing. `progress` (may be null; must outlive the
  // arming): while it moves, each period of `seconds` restarts.
  void arm(std::string phase, double seconds, std::function<std::string()> cause = {},
           const std::atomic<std::uint64_t>* progress = nullptr);
  void disarm();

 private:
  void watch();

  std::mutex mutex_;
  std::condition_variable changed_;
  bool armed_ = false, stopping_ = false;
  std::string phase_;
  std::function<std::string()> cause_;
  double seconds_ = 0;
  const std::atomic<std::uint64_t>* progress_ = nullptr;
  std::uint64_t progress_seen_ = 0;  // the counter at the start of the current period
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;  // last: starts after the fields above exist
};

}  // namespace dynatrain::job
