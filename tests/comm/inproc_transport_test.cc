// Bootstrap 1 of the comm test core: ranks as threads (InprocWorld / run_ranks), 1..4 ranks.
// Also the tests that only make sense in-process (abort, timeouts, shared-memory barrier check).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

#include "comm/inproc/inproc_transport.h"
#include "common/error.h"
#include "tests/comm/transport_cases.h"

namespace dynatrain::comm {
namespace {

using testing::CommCase;
using testing::transport_cases;

// Short enough that a deadlocked case fails fast, long enough for a loaded 2-core machine.
InprocOptions test_options() {
  InprocOptions o;
  o.wait_timeout = std::chrono::seconds(20);
  return o;
}

class InprocCase : public ::testing::TestWithParam<std::tuple<CommCase, int>> {};

TEST_P(InprocCase, Runs) {
  const auto& [c, ranks] = GetParam();
  try {
    run_ranks(
        ranks, [&](Transport& t) { c.body(t); }, test_options());
  } catch (const std::exception& e) {
    FAIL() << c.name << " with " << ranks << " ranks: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Generic, InprocCase,
                         ::testing::Combine(::testing::ValuesIn(transport_cases()), ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<InprocCase::ParamType>& info) {
                           return std::string(std::get<0>(info.param).name) + "_np" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(Inproc, BackendName) {
  InprocWorld world(2);
  EXPECT_STREQ(world.transport(1).backend(), "inproc");
  EXPECT_EQ(world.transport(1).rank(), 1);
  EXPECT_EQ(world.transport(1).size(), 2);
}

TEST(Inproc, WorldRejectsZeroRanks) { EXPECT_THROW(InprocWorld(0), InvariantError); }

// Rank 1 throws while rank 0 is blocked in a receive from it: run_ranks must not hang, and must
// rethrow rank 1's exception (not rank 0's abort CommError).
TEST(Inproc, RunRanksRethrowsFirstAndUnblocksOthers) {
  std::atomic<bool> rank0_saw_comm_error{false};
  try {
    run_ranks(
        2,
        [&](Transport& t) {
          if (t.rank() == 1) throw std::logic_error("boom from rank 1");
          char c;
          try {
            t.irecv(&c, 1, 1, 0)->wait();
          } catch (const CommError&) {
            rank0_saw_comm_error = true;
            throw;
          }
        },
        test_options());
    FAIL() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "boom from rank 1");
  }
  EXPECT_TRUE(rank0_saw_comm_error.load());
}

// A rendezvous transport reports a missing partner as a timeout, not a hang; the request
// is retired (its buffer is no longer referenced) and the error names the operation.
TEST(Inproc, WaitTimesOutWithMessage) {
  InprocOptions o;
  o.wait_timeout = std::chrono::milliseconds(100);
  InprocWorld world(2, o);
  char c = 0;
  auto req = world.transport(0).irecv(&c, 1, 1, 42);
  try {
    req->wait();
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("irecv from 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tag 42"), std::string::npos) << e.what();
  }
  // The retired receive must not match a later send: the send times out too.
  char d = 1;
  EXPECT_THROW(world.transport(1).isend(&d, 1, 0, 42)->wait(), CommError);
  EXPECT_EQ(c, 0);
}

// Both ranks send first and only then receive: MPI may get away with it for small messages
// (eager buffering); the inproc transport is strict and reports it.
TEST(Inproc, SendBeforeReceiveDeadlockIsReported) {
  InprocOptions o;
  o.wait_timeout = std::chrono::milliseconds(200);
  EXPECT_THROW(run_ranks(
                   2,
                   [](Transport& t) {
                     char out = 1, in = 0;
                     t.isend(&out, 1, 1 - t.rank(), 0)->wait();
                     t.irecv(&in, 1, 1 - t.rank(), 0)->wait();
                   },
                   o),
               CommError);
}

// Barrier semantics checked through shared memory: nobody leaves before everybody arrived.
TEST(Inproc, BarrierSeparatesPhases) {
  constexpr int kRanks = 4, kRounds = 50;
  std::atomic<int> arrived{0};
  run_ranks(
      kRanks,
      [&](Transport& t) {
        for (int round = 1; round <= kRounds; ++round) {
          arrived.fetch_add(1);
          t.barrier();
          const int seen = arrived.load();
          if (seen < round * kRanks) throw std::runtime_error("left barrier early");
          t.barrier();
        }
      },
      test_options());
  EXPECT_EQ(arrived.load(), kRanks * kRounds);
}

// Reductions add in rank order: repeated runs give identical bits even for inexact values.
TEST(Inproc, ReductionsAreDeterministic) {
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    std::vector<float> result;
    std::mutex mu;
    run_ranks(
        3,
        [&](Transport& t) {
          std::vector<float> v(100);
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i + 1) / (t.rank() + 3);
          t.all_reduce_sum(v.data(), v.size());
          std::lock_guard lock(mu);
          if (result.empty())
            result = v;
          else if (result != v)
            throw std::runtime_error("ranks disagree");
        },
        test_options());
    if (run == 0) first = result;
    EXPECT_EQ(result, first);
  }
}

TEST(Inproc, AbortedWorldRefusesNewWork) {
  InprocWorld world(2);
  world.abort("test abort");
  char c = 0;
  try {
    world.transport(0).isend(&c, 1, 1, 0);
    FAIL() << "no exception";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos);
  }
}

}  // namespace
}  // namespace dynatrain::comm
