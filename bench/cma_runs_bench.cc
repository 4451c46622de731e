// Cross-memory reads at the run sizes a switch uses, against the ways around them: what the
// MPI backend's runs protocol (comm/mpi/cma_copy.h) costs per byte here, so the choice between
// direct runs and packed messages rests on a measurement of this machine.
//
//   bench_cma_runs [MiB] [REPS]      (defaults 256 MiB, 5 repetitions; prints a Markdown table)
//
// For each run length b, `MiB` of warm source bytes are moved to a destination where they sit
// in runs of b bytes at a stride of 2b (a TP slice of a row-major tensor), five ways:
//   contiguous  process_vm_readv, one remote and one local iovec (the plain message's single copy)
//   local runs  process_vm_readv, one remote iovec into the local runs (the engine's direct read)
//   remote runs process_vm_readv, the remote side in runs, the local side contiguous
//   staged      process_vm_readv into a contiguous staging buffer, then a memcpy per run
//               (a packed message's receive and its unpack)
//   memcpy      one memcpy of the same bytes between warm buffers (the machine's limit)
// Calls take at most IOV_MAX (1024) iovecs, as the backend's do. The process reads its own
// memory through process_vm_readv: the kernel pins and copies the pages as for another process.
// Rates are GB/s of wall time and of the thread's CPU time (less moved by other load); medians
// over the repetitions. Exit 2 when process_vm_readv is not permitted here.
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

double clock_s(clockid_t id) {
  timespec t{};
  clock_gettime(id, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

char* warm_block(std::size_t bytes, int fill) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "bench_cma_runs: mmap of %zu bytes failed\n", bytes);
    std::exit(1);
  }
  std::memset(p, fill, bytes);
  return static_cast<char*>(p);
}

// process_vm_readv of `local` <- `remote` in calls of at most 1024 iovecs a side; false on failure.
bool read_batched(const std::vector<iovec>& local, const std::vector<iovec>& remote) {
  constexpr std::size_t kBatch = 1024;
  const std::size_t calls = std::max(local.size(), remote.size());
  for (std::size_t i = 0; i < calls; i += kBatch) {
    // One side is a single iovec (or runs as many as the other): split the single one alike.
    const bool split_local = local.size() > remote.size();
    const std::vector<iovec>& many = split_local ? local : remote;
    const std::size_t n = std::min(kBatch, many.size() - i);
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < n; ++k) bytes += many[i + k].iov_len;
    const std::vector<iovec>& one = split_local ? remote : local;
    iovec single{static_cast<char*>(one[0].iov_base) + (one.size() == 1 ? i * many[0].iov_len : 0), bytes};
    const iovec* l = split_local ? &local[i] : &single;
    const iovec* r = split_local ? &single : &remote[i];
    const ssize_t got = process_vm_readv(getpid(), l, split_local ? n : 1, r, split_local ? 1 : n, 0);
    if (got != static_cast<ssize_t>(bytes)) return false;
  }
  return true;
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
  char* src = warm_block(bytes, 1);
  char* dst = warm_block(2 * bytes, 2);
  char* stage = warm_block(bytes, 3);
  std::printf("| run bytes | contiguous | local runs | remote runs | staged | memcpy | local runs / staged (CPU) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (std::size_t run : {std::size_t{2048}, std::size_t{5632}, std::size_t{65536}, std::size_t{1} << 20}) {
    std::vector<iovec> runs;
    for (std::size_t at = 0; at + run <= bytes; at += run) runs.push_back({dst + 2 * at, run});
    const std::size_t moved = runs.size() * run;
    const std::vector<iovec> whole_src{{src, moved}}, whole_stage{{stage, moved}};
    Rate contiguous, local_runs, remote_runs, staged, copy;
    bool ok = true;
    for (int k = 0; k < reps; ++k) {
      time_into(contiguous, moved, [&] { ok &= read_batched({{dst, moved}}, whole_src); });
      time_into(local_runs, moved, [&] { ok &= read_batched(runs, whole_src); });
      time_into(remote_runs, moved, [&] { ok &= read_batched(whole_stage, runs); });
      time_into(staged, moved, [&] {
        ok &= read_batched(whole_stage, whole_src);
        for (std::size_t i = 0; i < runs.size(); ++i) std::memcpy(runs[i].iov_base, stage + i * run, run);
      });
      time_into(copy, moved, [&] { std::memcpy(dst, src, moved); });
    }
    if (!ok) {
      std::fprintf(stderr, "bench_cma_runs: process_vm_readv failed or moved less: %s\n", std::strerror(errno));
      return 2;
    }
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
