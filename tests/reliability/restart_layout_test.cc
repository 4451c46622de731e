// The restart layout rule of `train --max-restarts` (job/supervisor.h): the most processes,
// then the same tp, then the same pp, then the same ep, then the most dp, among the layouts the
// trainer supports for the model and batch.
#include <gtest/gtest.h>

#include "common/error.h"
#include "job/supervisor.h"

namespace dynatrain::tools {
namespace {

std::string restart(const std::string& model, std::int64_t global_batch, const std::string& previous, int processes) {
  train::TrainerOptions o;
  o.model = vps::model_from_name(model);
  o.global_batch = global_batch;
  o.seq = 16;
  return job::choose_restart_layout(o, vps::ParallelConfig::parse(previous), processes).str();
}

TEST(RestartLayout, MostProcessesThenTheSameSplit) {
  // tiny-dense: 8 heads, 4 layers. tp=2 needs an even count: 3 processes run dp=3.
  EXPECT_EQ(restart("tiny-dense", 12, "tp=2,dp=2", 3), "tp=1,pp=1,dp=3,zero=1");
  // 7 processes fit no layout of batch 12; of the 6-process ones, tp=2 is kept.
  EXPECT_EQ(restart("tiny-dense", 12, "tp=2,pp=2,dp=2", 7), "tp=2,pp=1,dp=3,zero=1");
  // Batch 4 does not split over 3: 2 processes, tp and pp kept.
  EXPECT_EQ(restart("tiny-dense", 4, "tp=1,dp=4,zero=0", 3), "tp=1,pp=1,dp=2,zero=0");
  // Keeping tp and pp when the count allows it.
  EXPECT_EQ(restart("tiny-dense", 12, "tp=2,pp=2,dp=2", 4), "tp=2,pp=2,dp=1,zero=1");
  // MoE: ep must divide tp x dp; with 3 processes the experts are not split.
  EXPECT_EQ(restart("tiny-moe", 12, "dp=4,ep=2", 3), "tp=1,pp=1,dp=3,zero=1");
  EXPECT_EQ(restart("tiny-moe", 12, "dp=4,ep=4", 2), "tp=1,pp=1,dp=2,ep=2,zero=1");
}

TEST(RestartLayout, NoProcessesLeftIsRefused) { EXPECT_THROW(restart("tiny-dense", 12, "tp=2,dp=2", 0), InputError); }

}  // namespace
}  // namespace dynatrain::tools
