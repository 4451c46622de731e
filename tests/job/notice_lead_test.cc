// When a preemption notice's vacating switch is prepared behind a step (job/notice.h): the rule
// every rank applies to the same agreed figures, and the parsing of --notice-signal.
#include <signal.h>

#include <gtest/gtest.h>

#include "common/error.h"
#include "job/notice.h"

namespace dynatrain::job {
namespace {

TEST(NoticeLead, HidesThePrepareBehindOneStepWhenTwoStepsFitInHalfTheNotice) {
  EXPECT_EQ(notice_lead_steps(1.0, 30.0, 100), 1);
  EXPECT_EQ(notice_lead_steps(7.5, 30.0, 100), 1);  // 2 x 7.5 s = 15 s: exactly half
}

TEST(NoticeLead, PreparesAtOnceWhenTheDeadlineHasNoRoomForAStep) {
  EXPECT_EQ(notice_lead_steps(7.6, 30.0, 100), 0);
  EXPECT_EQ(notice_lead_steps(1.0, 3.0, 100), 0);
}

TEST(NoticeLead, PreparesAtOnceBeforeAnyStepIsTimed) { EXPECT_EQ(notice_lead_steps(0.0, 30.0, 100), 0); }

TEST(NoticeLead, PreparesAtOnceBeforeTheLastStep) {
  // A commit after the last step would never run: the switch goes before it.
  EXPECT_EQ(notice_lead_steps(1.0, 30.0, 1), 0);
  EXPECT_EQ(notice_lead_steps(1.0, 30.0, 2), 1);
}

TEST(NoticeSignal, ParsesTheValidNamesAndRefusesOthersByName) {
  EXPECT_EQ(parse_notice_signal("TERM"), SIGTERM);
  EXPECT_EQ(parse_notice_signal("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(parse_notice_signal("none"), 0);
  try {
    parse_notice_signal("KILL");
    FAIL() << "KILL accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'KILL' is not a notice signal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dynatrain::job
