// Bootstrap 2 of the exec test core: ranks as processes, `mpirun -np N test_exec_mpi`.
// Runs every case of transition_cases(N, argv[1] or 2) and large_buffer_cases(N, 4 MiB), two_class_cases(N) at N = 4, 6 (plus the fixed cases at N == 2, 4). A case that
// fails on any rank prints the rank's message and calls MPI_Abort, so mpirun exits non-zero
// and no rank waits for a peer that gave up. Rank 0 prints one line per case.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "comm/mpi/mpi_transport.h"
#include "tests/exec/exec_cases.h"
#include "testing/seed.h"
#include "common/clock.h"

int main(int argc, char** argv) {
  using namespace dynatrain;
  comm::MpiSession session(&argc, &argv);
  auto world = comm::MpiTransport::world();
  const int n = world->size(), me = world->rank();
  std::string current = "setup";
  try {
    // argv[1]: random switches of each kind (default 2).
    const int per_kind = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
    auto cases = exec::cases::transition_cases(n, per_kind);
    // Megatron-sized buckets (2-16 MiB buffers) under a 4 MiB budget: the page-wise path.
    for (const auto& c : exec::cases::large_buffer_cases(n, std::size_t{4} << 20)) cases.push_back(c);
    // Ranks on nodes of two (LinkOverlap::kOn): one pipeline per link class, real processes.
    if (n == 4 || n == 6)
      for (const auto& c : exec::cases::two_class_cases(n)) cases.push_back(c);
    for (const auto& c : cases) {
      current = c.name();
      const auto t0 = std::chrono::steady_clock::now();
      const auto s = exec::cases::run_case(c, *world);
      if (me == 0)
        std::printf("[ok] np%d %-70s %6.3fs  %3llu msgs  %3llu waves %s\n", n, current.c_str(), seconds_since(t0),
                    static_cast<unsigned long long>(s.messages), static_cast<unsigned long long>(s.waves),
                    s.wave_order.c_str());
    }
    if (n == 2) {
      current = "strided_direct_case";
      exec::cases::strided_direct_case(*world);
      if (me == 0) std::printf("[ok] np2 strided direct transfers (runs_direct %d)\n", world->runs_direct(1 - me));
    }
    if (n == 4) {
      current = "message_count_case";
      exec::cases::message_count_case(*world);
      if (me == 0) std::printf("[ok] np4 message counts per rank\n");
      current = "sends_ahead_case";
      exec::cases::sends_ahead_case(*world);
      if (me == 0) std::printf("[ok] np4 direct sends posted ahead of their rounds\n");
      current = "commit_ahead_case";
      exec::cases::commit_ahead_case(*world);
      if (me == 0) std::printf("[ok] np4 receives committed ahead\n");
      current = "zero_copy_keep_case";
      exec::cases::zero_copy_keep_case(*world);
      if (me == 0) std::printf("[ok] np4 zero-copy keeps\n");
      current = "link_overlap_case";
      exec::cases::link_overlap_case(*world);
      if (me == 0) std::printf("[ok] np4 link classes overlapped\n");
      current = "remapped_keep_case";
      exec::cases::remapped_keep_case(*world);
      if (me == 0) std::printf("[ok] np4 remapped keeps\n");
      current = "keep_path_case";
      exec::cases::keep_path_case(*world);
      if (me == 0) std::printf("[ok] np4 keep path chosen and honoured\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] case %s FAILED (%s): %s\n", me, current.c_str(), testing::seed_note().c_str(),
                 e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::fflush(stdout);
  world.reset();
  return 0;
}
