// Cross-memory reads at the run sizes a switch uses, against the ways around them: what the
// MPI backend's runs protocol (comm/mpi/cma_copy.h) costs per byte here, so the choice between
// direct runs and packed messages rests on a measurement of this machine.
//
//   bench_cma_runs [MiB] [REPS] [huge]   (defaults 256 MiB, 5 repetitions, 4 KiB pages; prints a
//                                        Markdown table; `huge`: every buffer MADV_HUGEPAGE first)
//
// For each run length b, `MiB` of warm source bytes are moved to a destination where they sit
// in runs of b bytes at a stride of 2b (a TP slice of a row-major tensor), five ways:
//   contiguous  process_vm_readv, one remote and one local iovec (the plain message's single copy)
//   local runs  process_vm_readv, one remote iovec into the local runs (the engine's direct read)
//   remote runs process_vm_readv, the remote side in runs, the local side contiguous
//   staged      process_vm_readv into a contiguous staging buffer, then a memcpy per run
//               (a packed message's receive and its unpack)
//   memcpy      one memcpy of the same bytes between warm buffers (the machine's limit)
// Every read is the backend's own copy_remote_runs (comm/mpi/cma_copy.h: calls of at most
// IOV_MAX iovecs a side, adjacent runs merged). The process reads its own memory through
// process_vm_readv: the kernel pins and copies the pages as for another process.
// Rates are GB/s of wall time and of the thread's CPU time (less moved by other load); medians
// over the repetitions. Exit 2 when process_vm_readv is not permitted here.
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <exception>
#include <string>
#include <vector>

#include "comm/mpi/cma_copy.h"

namespace {

double clock_s(clockid_t id) {
  timespec t{};
  clock_gettime(id, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

char* warm_block(std::size_t bytes, int fill, bool huge) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "bench_cma_runs: mmap of %zu bytes failed\n", bytes);
    std::exit(1);
  }
  if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);  // refused without transparent huge pages: 4 KiB pages then
  std::memset(p, fill, bytes);
  return static_cast<char*>(p);
}

using dynatrain::comm::ByteRun;
using dynatrain::comm::mpi_detail::Copy;
using dynatrain::comm::mpi_detail::copy_remote_runs;
using dynatrain::comm::mpi_detail::runs_descriptor;

// Reads the runs `from` of `src` (through the descriptor the backend would send) into the runs
// `to` of `dst`, with the backend's own copy (comm/mpi/cma_copy.h); false when it throws.
bool read_runs(const char* src, const std::vector<ByteRun>& from, char* dst, const std::vector<ByteRun>& to) {
  try {
    copy_remote_runs(Copy::kRead, runs_descriptor(src, from), reinterpret_cast<std::byte*>(dst), to, "bench_cma_runs");
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cma_runs: %s\n", e.what());
    return false;
  }
}

struct Rate {
  std::vector<double> wall, cpu;  // GB/s per repetition
};

void time_into(Rate& r, std::size_t bytes, const std::function<void()>& work) {
  const double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  work();
  r.wall.push_back(static_cast<double>(bytes) / 1e9 / (clock_s(CLOCK_MONOTONIC) - w0));
  r.cpu.push_back(static_cast<double>(bytes) / 1e9 / (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool huge = argc > 3 && std::string(argv[3]) == "huge";
  char* src = warm_block(bytes, 1, huge);
  char* dst = warm_block(2 * bytes, 2, huge);
  char* stage = warm_block(bytes, 3, huge);
  std::printf("| run bytes | contiguous | local runs | remote runs | staged | memcpy | local runs / staged (CPU) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (std::size_t run : {std::size_t{2048}, std::size_t{5632}, std::size_t{65536}, std::size_t{1} << 20}) {
    std::vector<ByteRun> runs;  // of `dst`, at a stride of 2 * run
    for (std::size_t at = 0; at + run <= bytes; at += run) runs.push_back({2 * at, run});
    const std::size_t moved = runs.size() * run;
    const std::vector<ByteRun> whole{{0, moved}};
    Rate contiguous, local_runs, remote_runs, staged, copy;
    bool ok = true;
    for (int k = 0; k < reps; ++k) {
      time_into(contiguous, moved, [&] { ok &= read_runs(src, whole, dst, whole); });
      time_into(local_runs, moved, [&] { ok &= read_runs(src, whole, dst, runs); });
      time_into(remote_runs, moved, [&] { ok &= read_runs(dst, runs, stage, whole); });
      time_into(staged, moved, [&] {
        ok &= read_runs(src, whole, stage, whole);
        for (std::size_t i = 0; i < runs.size(); ++i) std::memcpy(dst + runs[i].offset, stage + i * run, run);
      });
      time_into(copy, moved, [&] { std::memcpy(dst, src, moved); });
    }
    if (!ok) return 2;
    auto cell = [](const Rate& r) {
      char text[48];
      std::snprintf(text, sizeof(text), "%.2f (%.2f)", median(r.wall), median(r.cpu));
      return std::string(text);
    };
    std::printf("| %zu | %s | %s | %s | %s | %s | %.2f |\n", run, cell(contiguous).c_str(), cell(local_runs).c_str(),
                cell(remote_runs).c_str(), cell(staged).c_str(), cell(copy).c_str(),
                median(local_runs.cpu) / median(staged.cpu));
  }
  return 0;
}
