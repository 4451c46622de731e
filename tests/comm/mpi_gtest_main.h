// The main of a gtest binary run under mpirun: MPI with MPI_THREAD_MULTIPLE, gtest's progress
// printed by rank 0 only, the exit code the worst over ranks.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "comm/mpi/mpi_transport.h"

namespace dynatrain::comm::testing {

inline int run_mpi_gtest(int argc, char** argv, const char* name) {
  int result = 1;
  try {
    MpiSession session(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    const int mine = RUN_ALL_TESTS();
    MPI_Allreduce(&mine, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
  return result;
}

}  // namespace dynatrain::comm::testing
