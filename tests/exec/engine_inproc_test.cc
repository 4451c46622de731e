// Bootstrap 1 of the exec test core: ranks as threads (comm::run_ranks), 1, 2, 3, 4 and 5 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "comm/inproc/inproc_transport.h"
#include "common/error.h"
#include "tools/run_transition_cli.h"
#include "tests/exec/exec_cases.h"
#include "testing/seed.h"

namespace dynatrain::exec {
using tools::run_transition_command;
using tools::RunTransitionArgs;
namespace {

using cases::TransitionCase;

comm::InprocOptions test_options() {
  comm::InprocOptions o;
  o.wait_timeout = std::chrono::seconds(30);
  return o;
}

// DT_EXEC_TEST_PER_KIND=n (default 2) draws n random switches of each kind per rank count.
std::vector<std::tuple<TransitionCase, int>> all_cases() {
  std::vector<std::tuple<TransitionCase, int>> out;
  const char* env = std::getenv("DT_EXEC_TEST_PER_KIND");
  const int per_kind = env ? std::max(1, std::atoi(env)) : 2;
  for (int ranks : {1, 2, 3, 4, 5})
    for (const auto& c : cases::transition_cases(ranks, per_kind)) out.emplace_back(c, ranks);
  return out;
}

class InprocTransition : public ::testing::TestWithParam<std::tuple<TransitionCase, int>> {};

TEST_P(InprocTransition, MovesEveryElementWithinBudget) {
  const auto& [c, ranks] = GetParam();
  try {
    comm::run_ranks(
        ranks, [&](comm::Transport& t) { cases::run_case(c, t); }, test_options());
  } catch (const std::exception& e) {
    FAIL() << c.name() << " on " << ranks << " ranks: " << e.what() << " (" << testing::seed_note() << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Random, InprocTransition, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<InprocTransition::ParamType>& info) {
                           return "np" + std::to_string(std::get<1>(info.param)) + "_" +
                                  std::get<0>(info.param).name() + "_" + std::to_string(info.index);
                         });

// Budgets of 4 and 8 MiB against 2-16 MiB buffers (Megatron-sized buckets), 2 and 4 ranks.
std::vector<std::tuple<TransitionCase, int>> large_cases() {
  std::vector<std::tuple<TransitionCase, int>> out;
  for (int ranks : {2, 4})
    for (std::size_t budget : {std::size_t{4} << 20, std::size_t{8} << 20})
      for (const auto& c : cases::large_buffer_cases(ranks, budget)) out.emplace_back(c, ranks);
  return out;
}
INSTANTIATE_TEST_SUITE_P(LargeBuffers, InprocTransition, ::testing::ValuesIn(large_cases()),
                         [](const ::testing::TestParamInfo<InprocTransition::ParamType>& info) {
                           return "np" + std::to_string(std::get<1>(info.param)) + "_" +
                                  std::get<0>(info.param).name() + "_" + std::to_string(info.index);
                         });

// Ranks on nodes of two (TransitionOptions::topology, LinkOverlap::kOn): one pipeline per link class.
std::vector<std::tuple<TransitionCase, int>> two_class_cases() {
  std::vector<std::tuple<TransitionCase, int>> out;
  for (int ranks : {3, 4, 5})
    for (const auto& c : cases::two_class_cases(ranks)) out.emplace_back(c, ranks);
  return out;
}
INSTANTIATE_TEST_SUITE_P(TwoLinkClasses, InprocTransition, ::testing::ValuesIn(two_class_cases()),
                         [](const ::testing::TestParamInfo<InprocTransition::ParamType>& info) {
                           return "np" + std::to_string(std::get<1>(info.param)) + "_" +
                                  std::get<0>(info.param).name() + "_" + std::to_string(info.index);
                         });

TEST(InprocTransitionFixed, LinkClassesOverlapEveryByteArrives) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::link_overlap_case(t); }, test_options());
}

// kAuto: a transport whose ranks span nodes (InprocOptions::ranks_per_node) gets two classes,
// one that sees a single node keeps one pipeline (run_case asserts which, and every byte).
TEST(InprocTransitionFixed, LinkClassesFollowTheTransportsNodes) {
  TransitionCase c{
      .kind = "auto", .model = "tiny-moe", .from = "tp=2,dp=2,zero=1", .to = "dp=4,ep=2,zero=2", .world = 4};
  for (int per_node : {0, 2, 3}) {
    comm::InprocOptions o = test_options();
    o.ranks_per_node = per_node;
    std::vector<std::uint64_t> classes(4);
    comm::run_ranks(
        4, [&](comm::Transport& t) { classes[t.rank()] = cases::run_case(c, t).link_classes; }, o);
    for (auto k : classes) EXPECT_EQ(k, per_node == 0 ? 1u : 2u) << "ranks per node " << per_node;
  }
}

TEST(InprocTransitionFixed, KeptBuffersHandedOverWithoutCopy) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::zero_copy_keep_case(t); }, test_options());
}

TEST(InprocTransitionFixed, KeptRunsAtNewOffsetsRemappedNotCopied) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::remapped_keep_case(t); }, test_options());
}

TEST(InprocTransitionFixed, KeepPathChosenAndHonoured) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::keep_path_case(t); }, test_options());
}

TEST(InprocTransitionFixed, StridedSlicesReceivedWithoutUnpack) {
  comm::run_ranks(
      2, [](comm::Transport& t) { cases::strided_direct_case(t); }, test_options());
}

TEST(InprocTransitionFixed, AbsentSourcesThePlanDoesNotReadAreAccepted) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::absent_source_case(t); }, test_options());
}

TEST(InprocTransitionFixed, MessageCountsPerRank) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::message_count_case(t); }, test_options());
}

TEST(InprocTransitionFixed, DirectSendsGoAheadOfTheirRounds) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::sends_ahead_case(t); }, test_options());
}

TEST(InprocTransitionFixed, ReceivesCommittedAhead) {
  comm::run_ranks(
      4, [](comm::Transport& t) { cases::commit_ahead_case(t); }, test_options());
}

}  // namespace
}  // namespace dynatrain::exec

namespace dynatrain::exec {
namespace {

// Runs the command on 5 in-process ranks; returns its JSON and appends what rank 0 printed.
nlohmann::json run_command(const RunTransitionArgs& args, std::string* text) {
  std::FILE* out = std::tmpfile();
  std::vector<int> codes(5, -1);
  comm::run_ranks(
      5, [&](comm::Transport& t) { codes[t.rank()] = run_transition_command(args, t, out); }, test_options());
  for (int c : codes) EXPECT_EQ(c, 0);
  std::rewind(out);
  std::string got(1 << 14, '\0');
  got.resize(std::fread(got.data(), 1, got.size(), out));
  std::fclose(out);
  *text += got;
  std::ifstream f(args.json);
  return nlohmann::json::parse(f);
}

RunTransitionArgs command_args() {
  RunTransitionArgs args;
  args.model = "tiny-moe";
  args.from = "tp=2,dp=2,zero=1";
  args.to = "dp=4,ep=2,zero=2";
  args.mem_budget = 512 << 10;
  args.bucket_elems = 700;
  args.verify = true;
  args.repeat = 3;
  args.json = ::testing::TempDir() + "run_transition.json";
  return args;
}

// The defaults (page-aligned layouts, the prefault) and the opt-outs (--no-align-pages
// --no-prefault: the old defaults), every destination element verified. The default prefault
// touches what the dry run predicts the switch takes beyond its source, so the pool never holds
// more than the engine's bound, max(source, destination) + budget (plus page rounding).
TEST(RunTransitionCommand, VerifiesRepeatsAndWritesJson) {
  RunTransitionArgs args = command_args();
  EXPECT_TRUE(args.align_pages) << "page-aligned layouts are the default";
  EXPECT_TRUE(args.prefault) << "the prefault is the default";
  std::string text;
  const auto j = run_command(args, &text);
  EXPECT_NE(text.find("verify: ok"), std::string::npos) << text;
  EXPECT_EQ(j["verify"], "ok");
  EXPECT_EQ(j["warm_repeats"], 2);
  EXPECT_EQ(j["ranks"], 5);
  EXPECT_GT(j["bytes_moved"].get<std::uint64_t>(), 0u);
  EXPECT_GT(j["lower_bound_seconds"].get<double>(), 0.0);
  EXPECT_TRUE(j["prefault"].get<bool>());
  EXPECT_TRUE(j["align_pages"].get<bool>());
  EXPECT_GE(j["prepare_seconds"].get<double>(), 0.0);
  for (const char* phase : {"keep", "pack", "wait", "unpack", "alloc", "agree", "dry"}) {
    EXPECT_GE(j["phases"][phase].get<double>(), 0.0) << phase;
    EXPECT_GE(j["warm_phases"][phase].get<double>(), 0.0) << phase;
  }
  const std::uint64_t prefaulted = j["prefaulted_bytes"].get<std::uint64_t>();
  EXPECT_GT(prefaulted, 0u) << "this switch grows the busiest rank's state";
  // Per rank: peak - source <= max(0, destination - source) + budget <= destination + budget.
  EXPECT_LE(prefaulted, j["max_dst_bytes"].get<std::uint64_t>() + j["budget_bytes"].get<std::uint64_t>());

  args.repeat = 1;
  args.prefault = args.align_pages = false;
  const auto off = run_command(args, &text);
  EXPECT_EQ(off["verify"], "ok");
  EXPECT_FALSE(off["prefault"].get<bool>());
  EXPECT_FALSE(off["align_pages"].get<bool>());
  EXPECT_EQ(off["prefaulted_bytes"].get<std::uint64_t>(), 0u);
  const auto bound = [](const nlohmann::json& r) {
    return std::max(r["max_src_bytes"].get<std::uint64_t>(), r["max_dst_bytes"].get<std::uint64_t>()) +
           r["budget_bytes"].get<std::uint64_t>();
  };
  for (const auto* r : {&j, &off}) {
    EXPECT_TRUE((*r)["peak_within_bound"].get<bool>()) << text;
    // The floor with one core a rank: the plain exchange, then the copied keeps at the measured
    // copy rate, which are there exactly when some kept byte was neither handed over nor remapped.
    const double keep_copy = (*r)["keep_copy_seconds"].get<double>();
    EXPECT_NEAR((*r)["exchange_plus_keep_copy_seconds"].get<double>(),
                (*r)["plain_exchange_seconds"].get<double>() + keep_copy, 1e-9);
    const std::uint64_t copied = (*r)["bytes_kept"].get<std::uint64_t>() -
                                 (*r)["kept_zero_copy_bytes"].get<std::uint64_t>() -
                                 (*r)["kept_remapped_bytes"].get<std::uint64_t>();
    EXPECT_EQ(keep_copy > 0, copied > 0) << copied << " copied kept bytes, " << keep_copy << " s";
    EXPECT_LE((*r)["pool_peak_reserved_max"].get<std::uint64_t>(), bound(*r) + (std::uint64_t{64} << 10)) << text;
  }

  // Too few ranks for the switch: an InputError naming the need.
  args.to = "dp=8";
  std::FILE* out = std::tmpfile();
  EXPECT_THROW(comm::run_ranks(
                   2, [&](comm::Transport& t) { run_transition_command(args, t, out); }, test_options()),
               InputError);
  std::fclose(out);
}

}  // namespace
}  // namespace dynatrain::exec
