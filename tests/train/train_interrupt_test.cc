// TrainerOptions::interrupt (train/interrupt.h): a raised flag abandons the step in progress with
// StepInterrupted and applies nothing; the run then goes on exactly as one never interrupted.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "comm/inproc/inproc_transport.h"
#include "tests/train/train_fixture.h"
#include "train/data.h"

namespace dynatrain::train::test {
namespace {

using vps::StateKind;

TEST(TrainInterrupt, AnInterruptedStepAppliesNothing) {
  TrainerOptions o = tiny("tiny-dense");
  std::vector<double> want_losses;
  const auto want = state_after(o, "tp=2,dp=2", 3, &want_losses);
  std::atomic<bool> interrupt{false};
  o.interrupt = &interrupt;
  std::vector<double> got_losses;
  std::vector<std::vector<std::vector<float>>> got;
  std::atomic<int> thrown{0};
  comm::run_ranks(4, [&](comm::Transport& world) {
    set_intra_op_threads(1);
    Trainer t(o, cfg("tp=2,dp=2"), world, embedded_text());
    for (int i = 0; i < 3; ++i) {
      if (i == 1) {  // raised before the step: every rank meets it at the first layer
        world.barrier();
        if (world.rank() == 0) interrupt = true;
        world.barrier();
        try {
          t.step();
        } catch (const StepInterrupted&) {
          ++thrown;
        }
        EXPECT_EQ(t.steps_done(), 1);
        world.barrier();
        if (world.rank() == 0) interrupt = false;
        world.barrier();
      }
      const auto st = t.step();
      if (world.rank() == 0) got_losses.push_back(st.loss);
    }
    for (StateKind k : {StateKind::kParam, StateKind::kMaster, StateKind::kExpAvg, StateKind::kExpAvgSq}) {
      auto g = t.gather(k);
      if (world.rank() == 0) got.push_back(std::move(g.tensors));
    }
  });
  EXPECT_EQ(thrown.load(), 4);
  EXPECT_EQ(got_losses, want_losses);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got[k], want[k]) << "state kind " << k << " differs";
}

}  // namespace
}  // namespace dynatrain::train::test
