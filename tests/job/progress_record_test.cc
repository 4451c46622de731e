// The supervisor's progress records (job/progress_record.h): what the trainer writes reads back
// the same; a human line is no record; a record of another version or with a bad field is
// refused naming it; the setting that asks for them.
#include "job/progress_record.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "common/error.h"
#include "testing/error_message.h"

namespace dynatrain::job {
namespace {

std::string refusal(const std::string& line) {
  return testing::error_message<InputError>([&] { parse_progress_line(line); });
}

TEST(ProgressRecord, StepRoundTripsAfterAProgressBar) {
  const ProgressRecord r{ProgressRecord::Event::kStep, 41, 3, "tp=1,pp=1,dp=3,zero=1", ""};
  const auto back = parse_progress_line("[####......] eta 3s  " + progress_line(r));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->event, ProgressRecord::Event::kStep);
  EXPECT_EQ(back->step, 41);
  EXPECT_EQ(back->processes, 3);
  EXPECT_EQ(back->layout, "tp=1,pp=1,dp=3,zero=1");
}

TEST(ProgressRecord, NoticeRoundTrips) {
  const auto back =
      parse_progress_line(progress_line({ProgressRecord::Event::kEveryProcessNoticed, -1, 0, "", "SIGTERM"}));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->event, ProgressRecord::Event::kEveryProcessNoticed);
  EXPECT_EQ(back->signal, "SIGTERM");
}

TEST(ProgressRecord, HumanLinesAreNoRecords) {
  EXPECT_FALSE(
      parse_progress_line("step     5  loss 5.0352  2658 tok/s  72.23 ms  tp=2,pp=1,dp=2,zero=1  4 processes"));
  EXPECT_FALSE(parse_progress_line("notice: every process has notice; the job ends (SIGTERM)"));
  EXPECT_FALSE(parse_progress_line("{\"version\":1,\"event\":\"step\",\"step\":3,\"processes\":2,\"layout\":\"x\"}"));
}

TEST(ProgressRecord, RefusesAnotherVersionAndBadFields) {
  const std::string p = kProgressPrefix;
  EXPECT_NE(refusal(p + R"({"version":2,"event":"step","step":3,"processes":2,"layout":"x"})")
                .find("version 2 is not supported; this supervisor reads version 1 (every process of a job must run "
                      "the same dynatrain)"),
            std::string::npos);
  EXPECT_NE(refusal(p + R"({"event":"step"})").find("no field \"version\""), std::string::npos);
  EXPECT_NE(refusal(p + R"({"version":1,"event":"step","step":3,"layout":"x"})").find("no field \"processes\""),
            std::string::npos);
  EXPECT_NE(refusal(p + R"({"version":1,"event":"step","step":"3","processes":2,"layout":"x"})")
                .find("field \"step\" is \"3\", of the wrong type"),
            std::string::npos);
  EXPECT_NE(refusal(p + R"({"version":1,"event":"grow"})").find("event \"grow\" is not one of"), std::string::npos);
  EXPECT_NE(refusal(p + "step 3").find("is not a JSON object"), std::string::npos);
  EXPECT_NE(refusal(p + R"({"version":1,"event":"step","step":-1,"processes":2,"layout":"x"})").find("step -1"),
            std::string::npos);
}

TEST(ProgressRecord, WantedOnlyForTheVersionWritten) {
  unsetenv(kProgressEnv);
  EXPECT_FALSE(progress_records_wanted());
  setenv(kProgressEnv, "1", 1);
  EXPECT_TRUE(progress_records_wanted());
  setenv(kProgressEnv, "2", 1);
  try {
    progress_records_wanted();
    ADD_FAILURE() << "version 2 taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("DT_PROGRESS_RECORDS='2'"), std::string::npos) << e.what();
  }
  unsetenv(kProgressEnv);
}

}  // namespace
}  // namespace dynatrain::job
