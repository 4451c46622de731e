// Bootstrap 2 of the comm test core: ranks as processes. Run as `mpirun -np N mpi_transport_test`.
// Every case runs twice: with the default chunk size and with a 7-byte MPI chunk, which pushes
// every message through the derived-datatype / chunked-collective paths that >2 GiB transfers use.
//
// Failure handling: a case that throws on any rank prints the rank's message and calls
// MPI_Abort, so mpirun exits non-zero and no rank is left waiting for a peer that gave up. gtest
// failures outside the cases are combined over ranks at the end (exit code = max over ranks).
// Only rank 0 prints gtest's progress.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "tests/comm/mpi_gtest_main.h"
#include "tests/comm/transport_cases.h"

namespace dynatrain::comm {
namespace {

using testing::CommCase;
using testing::transport_cases;

constexpr std::size_t kTinyChunk = 7;

class MpiCase : public ::testing::TestWithParam<std::tuple<CommCase, std::size_t>> {};

TEST_P(MpiCase, Runs) {
  const auto& [c, chunk] = GetParam();
  std::string failure;
  try {
    auto world = MpiTransport::world();
    world->set_max_chunk_bytes(chunk);
    c.body(*world);
    world->barrier();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "[rank %d] case %s (chunk %zu) FAILED: %s\n", rank, c.name, chunk, failure.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Generic, MpiCase,
                         ::testing::Combine(::testing::ValuesIn(transport_cases()),
                                            ::testing::Values(MpiTransport::kDefaultMaxChunkBytes, kTinyChunk)),
                         [](const ::testing::TestParamInfo<MpiCase::ParamType>& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) == kTinyChunk ? "_tinychunk" : "_default");
                         });

TEST(Mpi, SessionInitIsIdempotent) {
  EXPECT_FALSE(MpiSession::init());  // already initialised by main's session
  MpiSession second;                 // does not own MPI: its destructor must not finalise
}

TEST(Mpi, WorldMatchesCommWorld) {
  auto world = MpiTransport::world();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(world->rank(), rank);
  EXPECT_EQ(world->size(), size);
  EXPECT_STREQ(world->backend(), "mpi");
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(world->comm(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);  // a duplicate, not the same handle
}

TEST(Mpi, MaxChunkIsValidated) {
  auto world = MpiTransport::world();
  EXPECT_THROW(world->set_max_chunk_bytes(0), InvariantError);
  EXPECT_THROW(world->set_max_chunk_bytes(std::size_t{1} << 31), InvariantError);
  world->set_max_chunk_bytes(123);
  EXPECT_EQ(world->max_chunk_bytes(), 123u);
  auto child = world->split(0, world->rank());
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(static_cast<MpiTransport&>(*child).max_chunk_bytes(), 123u);
}

// Cross-memory attach is a property of the processes, not of the communicator: a split (which
// carries no MPI_TAG_UB attribute in Open MPI) and a communicator built from a split handle
// must agree with the world on every peer. Session 9 found splits always packing.
TEST(Mpi, SplitCommunicatorsKeepDirectRuns) {
  auto world = MpiTransport::world();
  auto child = world->split(0, world->size() - 1 - world->rank());  // same ranks, reversed
  ASSERT_NE(child, nullptr);
  MPI_Comm raw = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, world->rank(), &raw), MPI_SUCCESS);
  auto from_split = MpiTransport::from_comm(raw);
  MPI_Comm_free(&raw);
  for (int q = 0; q < world->size(); ++q) {
    EXPECT_EQ(child->runs_direct(world->size() - 1 - q), world->runs_direct(q)) << "peer " << q;
    EXPECT_EQ(from_split->runs_direct(q), world->runs_direct(q)) << "peer " << q;
  }
  if (world->rank() == 0) std::printf("[info] world runs_direct(0) = %d\n", world->runs_direct(0));
}

// MPI's own error (truncation) comes back as CommError naming the operation and MPI's text.
TEST(Mpi, ErrorMessageNamesOperationAndMpiString) {
  auto world = MpiTransport::world();
  if (world->size() < 2) GTEST_SKIP() << "needs two processes (Open MPI does not report truncation on self messages)";
  auto pair = world->split(world->rank() < 2 ? 0 : -1, world->rank());
  if (world->rank() == 0) {
    char out[16] = {};
    pair->isend(out, sizeof(out), 1, 3)->wait();
  } else if (world->rank() == 1) {
    char in[8] = {};
    try {
      pair->irecv(in, sizeof(in), 0, 3)->wait();
      ADD_FAILURE() << "no exception";
    } catch (const CommError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("irecv from 0 (tag 3, 8 bytes)"), std::string::npos) << what;
      EXPECT_NE(what.find("MPI_ERR_TRUNCATE"), std::string::npos) << what;
    }
  }
  world->barrier();
}

}  // namespace
}  // namespace dynatrain::comm

int main(int argc, char** argv) { return dynatrain::comm::testing::run_mpi_gtest(argc, argv, "mpi_transport_test"); }
