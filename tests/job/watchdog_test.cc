// The watchdog (job/watchdog.h) against slowness, not only silence: a phase whose progress
// counter keeps moving outlives many periods; one whose counter stops ends the job (exit 3)
// after one period without progress, naming the phase.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "job/watchdog.h"

namespace dynatrain::job {
namespace {

using namespace std::chrono_literals;

// Raises `progress` every `step` for `total`, as a slow switch's rounds would.
void progress_for(std::atomic<std::uint64_t>& progress, std::chrono::milliseconds step,
                  std::chrono::milliseconds total) {
  for (auto t = 0ms; t < total; t += step) {
    std::this_thread::sleep_for(step);
    progress.fetch_add(1);
  }
}

TEST(Watchdog, ASlowPhaseThatProgressesIsNotAHang) {
  std::atomic<std::uint64_t> progress{0};
  Watchdog dog;
  // Periods of 0.3 s; the phase runs 1.5 s (5 periods) and makes progress every 0.05 s: a
  // deadline that ignored progress would end the process here.
  dog.arm("a slow switch", 0.3, {}, &progress);
  progress_for(progress, 50ms, 1500ms);
  dog.disarm();
  SUCCEED();
}

TEST(WatchdogDeathTest, AStalledPhaseEndsTheJobAfterOnePeriodWithoutProgress) {
  EXPECT_EXIT(
      {
        std::atomic<std::uint64_t> progress{0};
        Watchdog dog;
        dog.arm("a stalled switch", 0.3, {}, &progress);
        progress_for(progress, 50ms, 600ms);  // progresses, then stops
        std::this_thread::sleep_for(10s);     // no progress: the watchdog ends the process first
      },
      ::testing::ExitedWithCode(3), "no progress for [0-9]+ s during a stalled switch");
}

}  // namespace
}  // namespace dynatrain::job
