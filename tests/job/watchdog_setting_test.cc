// The one watchdog setting (job/watchdog.h): DT_WATCHDOG_S for the CLI and the Python module,
// its former name read with a note, bad values refused by name, 0 = no deadline.
#include <cmath>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "job/watchdog.h"

namespace dynatrain::job {
namespace {

class WatchdogSetting : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    unsetenv("DT_WATCHDOG_S");
    unsetenv("DYNATRAIN_WATCHDOG_S");
  }
};

TEST_F(WatchdogSetting, DefaultsToSixtySecondsPlusTheBytesAtFiftyMegabytesPerSecond) {
  EXPECT_EQ(watchdog_seconds(), 60);
  EXPECT_DOUBLE_EQ(switch_timeout_seconds(100'000'000), 62);
}

TEST_F(WatchdogSetting, ReadsDtWatchdogS) {
  setenv("DT_WATCHDOG_S", "2.5", 1);
  EXPECT_EQ(watchdog_seconds(), 2.5);
  setenv("DYNATRAIN_WATCHDOG_S", "9", 1);  // the former name never overrides the setting
  EXPECT_EQ(watchdog_seconds(), 2.5);
}

TEST_F(WatchdogSetting, ZeroTurnsItOff) {
  setenv("DT_WATCHDOG_S", "0", 1);
  EXPECT_TRUE(std::isinf(switch_timeout_seconds(1 << 20)));
}

TEST_F(WatchdogSetting, TheFormerNameIsReadAndSaysItIsDeprecatedOnce) {
  setenv("DYNATRAIN_WATCHDOG_S", "7", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(watchdog_seconds(), 7);
  EXPECT_EQ(watchdog_seconds(), 7);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "dynatrain: note: DYNATRAIN_WATCHDOG_S is deprecated; set DT_WATCHDOG_S (read as it now)\n");
}

TEST_F(WatchdogSetting, RefusesWhatIsNotSecondsByName) {
  for (const char* bad : {"soon", "-1", "5s", "", "inf"}) {
    setenv("DT_WATCHDOG_S", bad, 1);
    try {
      watchdog_seconds();
      ADD_FAILURE() << "accepted DT_WATCHDOG_S=" << bad;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()),
                "DT_WATCHDOG_S='" + std::string(bad) + "' is not a number of seconds; valid: >= 0 (0: no watchdog)");
    }
  }
}

}  // namespace
}  // namespace dynatrain::job
