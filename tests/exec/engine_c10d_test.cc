// Bootstrap 3 of the exec test core: ranks as threads of one process, each with its own c10d
// ProcessGroupGloo over one TCPStore on 127.0.0.1 (comm::run_c10d_ranks), 2, 3 and 4 ranks.
// Gloo has no direct runs, so every scattered message goes packed: the same bodies check that
// the engine's fallback moves every element and counts its messages.
#include <gtest/gtest.h>

#include <chrono>

#include "comm/c10d/c10d_transport.h"
#include "tests/exec/exec_cases.h"
#include "testing/seed.h"

namespace dynatrain::exec {
namespace {

using cases::TransitionCase;

constexpr std::chrono::seconds kTimeout{60};

std::vector<std::tuple<TransitionCase, int>> all_cases() {
  std::vector<std::tuple<TransitionCase, int>> out;
  for (int ranks : {2, 3, 4})
    for (const auto& c : cases::transition_cases(ranks, 1)) out.emplace_back(c, ranks);
  for (const auto& c : cases::large_buffer_cases(2, std::size_t{4} << 20)) out.emplace_back(c, 2);
  return out;
}

class C10dTransition : public ::testing::TestWithParam<std::tuple<TransitionCase, int>> {};

TEST_P(C10dTransition, MovesEveryElementWithinBudget) {
  const auto& [c, ranks] = GetParam();
  try {
    comm::run_c10d_ranks(
        ranks, [&](comm::Transport& t) { cases::run_case(c, t); }, kTimeout);
  } catch (const std::exception& e) {
    FAIL() << c.name() << " on " << ranks << " ranks: " << e.what() << " (" << testing::seed_note() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Random, C10dTransition, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<C10dTransition::ParamType>& info) {
                           return "np" + std::to_string(std::get<1>(info.param)) + "_" +
                                  std::get<0>(info.param).name() + "_" + std::to_string(info.index);
                         });

TEST(C10dTransitionFixed, MessageCountsPerRank) {
  comm::run_c10d_ranks(
      4, [](comm::Transport& t) { cases::message_count_case(t); }, kTimeout);
}

TEST(C10dTransitionFixed, NoSendGoesAheadWithoutRuns) {
  comm::run_c10d_ranks(
      4, [](comm::Transport& t) { cases::sends_ahead_case(t); }, kTimeout);
}

TEST(C10dTransitionFixed, ReceivesCommittedAhead) {
  comm::run_c10d_ranks(
      4, [](comm::Transport& t) { cases::commit_ahead_case(t); }, kTimeout);
}

TEST(C10dTransitionFixed, StridedSlicesPackedWithoutDirectRuns) {
  comm::run_c10d_ranks(
      2, [](comm::Transport& t) { cases::strided_direct_case(t); }, kTimeout);
}

TEST(C10dTransitionFixed, KeptBuffersHandedOverWithoutCopy) {
  comm::run_c10d_ranks(
      4, [](comm::Transport& t) { cases::zero_copy_keep_case(t); }, kTimeout);
}

}  // namespace
}  // namespace dynatrain::exec
