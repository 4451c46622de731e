#include "job/watchdog.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/error.h"
#include "job/mpi_world.h"

namespace dynatrain::job {

namespace {

// The value of `name` as seconds >= 0; InputError naming it otherwise.
double seconds_from(const char* name, const char* text) {
  char* end = nullptr;
  const double parsed = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(parsed >= 0) || !std::isfinite(parsed))
    DT_INPUT_ERROR(name, "='", text, "' is not a number of seconds; valid: >= 0 (0: no watchdog)");
  return parsed;
}

}  // namespace

double watchdog_seconds() {
  if (const char* v = std::getenv("DT_WATCHDOG_S")) return seconds_from("DT_WATCHDOG_S", v);
  const char* old = std::getenv("DYNATRAIN_WATCHDOG_S");
  if (old == nullptr) return kDefaultWatchdogSeconds;
  const double seconds = seconds_from("DYNATRAIN_WATCHDOG_S", old);
  static std::atomic<bool> said{false};
  if (!is_nonzero_mpi_rank() && !said.exchange(true)) {
    std::fprintf(stderr, "dynatrain: note: DYNATRAIN_WATCHDOG_S is deprecated; set DT_WATCHDOG_S (read as it now)\n");
    std::fflush(stderr);
  }
  return seconds;
}

double switch_timeout_seconds(std::uint64_t bytes) {
  const double floor_s = watchdog_seconds();
  if (floor_s == 0) return std::numeric_limits<double>::infinity();
  return floor_s + static_cast<double>(bytes) / 50e6;
}

Watchdog::Watchdog() : thread_([this] { watch(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::arm(std::string phase, double seconds, std::function<std::string()> cause,
                   const std::atomic<std::uint64_t>* progress) {
  if (!std::isfinite(seconds)) return disarm();
  {
    std::lock_guard lock(mutex_);
    armed_ = true;
    phase_ = std::move(phase);
    cause_ = std::move(cause);
    seconds_ = seconds;
    progress_ = progress;
    progress_seen_ = progress ? progress->load(std::memory_order_relaxed) : 0;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  }
  changed_.notify_all();
}

void Watchdog::disarm() {
  {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }
  changed_.notify_all();
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (!armed_) {
      changed_.wait(lock);
      continue;
    }
    if (changed_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ && !stopping_ &&
        std::chrono::steady_clock::now() >= deadline_) {
      if (progress_ && progress_->load(std::memory_order_relaxed) != progress_seen_) {  // slow, not hung
        progress_seen_ = progress_->load(std::memory_order_relaxed);
        deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                           std::chrono::duration<double>(seconds_));
        continue;
      }
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.0f", seconds_);
      std::string cause = cause_ ? cause_() : std::string();
      if (cause.empty()) cause = "a peer stopped answering";
      abort_job("error",
                "no progress for " + std::string(seconds) + " s during " + phase_ + "; " + cause +
                    " (raise DT_WATCHDOG_S if it is only slow)",
                3);
    }
  }
}

}  // namespace dynatrain::job
