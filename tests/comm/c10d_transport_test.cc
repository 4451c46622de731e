// Bootstrap 3 of the comm test core: ranks as threads of one process, each with its own c10d
// ProcessGroupGloo over one TCPStore on 127.0.0.1 (run_c10d_ranks), 1..4 ranks. Also the facts
// only this backend has: its name, no direct runs, rendezvous errors.
#include <gtest/gtest.h>

#include <string>

#include "comm/c10d/c10d_transport.h"
#include "common/error.h"
#include "tests/comm/transport_cases.h"

namespace dynatrain::comm {
namespace {

using testing::CommCase;
using testing::transport_cases;

class C10dCase : public ::testing::TestWithParam<std::tuple<CommCase, int>> {};

TEST_P(C10dCase, Runs) {
  const auto& [c, ranks] = GetParam();
  try {
    run_c10d_ranks(
        ranks,
        [&](Transport& t) {
          c.body(t);
          t.barrier();
        },
        std::chrono::seconds(30));
  } catch (const std::exception& e) {
    FAIL() << c.name << " with " << ranks << " ranks: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Generic, C10dCase,
                         ::testing::Combine(::testing::ValuesIn(transport_cases()), ::testing::Values(1, 2, 3, 4)),
                         [](const ::testing::TestParamInfo<C10dCase::ParamType>& info) {
                           return std::string(std::get<0>(info.param).name) + "_np" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(C10d, BackendNameAndPackedRuns) {
  run_c10d_ranks(2, [](Transport& t) {
    if (std::string(t.backend()) != "c10d") throw std::runtime_error(std::string("backend ") + t.backend());
    for (int q = 0; q < t.size(); ++q)
      if (t.runs_direct(q)) throw std::runtime_error("c10d claims direct runs");
    if (t.node_of(1) != t.node_of(0)) throw std::runtime_error("threads of one process on two nodes");
  });
}

TEST(C10d, BadOptionsAreInputErrors) {
  C10dOptions o;
  o.rank = 2;
  o.size = 2;
  EXPECT_THROW(c10d_world(o), InputError);
  o.rank = 0;
  o.master_port = 70000;
  EXPECT_THROW(c10d_world(o), InputError);
}

TEST(C10d, EnvironmentWithoutRankIsNoWorld) {
  unsetenv("RANK");
  EXPECT_EQ(c10d_world_from_env(), nullptr);
  setenv("RANK", "x", 1);
  setenv("WORLD_SIZE", "2", 1);
  try {
    c10d_world_from_env();
    ADD_FAILURE() << "no exception";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK=x"), std::string::npos) << e.what();
  }
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

}  // namespace
}  // namespace dynatrain::comm
