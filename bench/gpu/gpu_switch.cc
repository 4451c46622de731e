// A GB-scale switch between two processes that share one CUDA device, against the device's copy
// bound measured in the same run. Run as `mpirun -np 2 bench_gpu_switch [--gib G] [--repeat N]
// [--out FILE]` (scripts/gpu-check.sh does); `bench_gpu_switch --device-count` prints the number
// of CUDA devices (0 without a device or driver) and exits.
//
// The switch: one [rows, 8192] matrix of 4-byte elements (G GiB in all) held as two column
// halves (tp=2, one a process) becomes two row halves. Each process's destination is one
// quarter kept from its own source and one quarter read from its peer's source, which it maps
// with CUDA IPC (cudaIpcOpenMemHandle); both are strided box copies (copy_box through
// exec/cuda's CudaMemory: one kernel each, rows of 16 KiB). Both processes switch at once.
// The copy bound: both processes at once cudaMemcpyAsync device-to-device the same bytes
// (their whole destination) from one contiguous buffer. Printed and written: the best of N of
// each, and switch / bound. Every destination element is checked (a pure function of its
// global index) after the last switch.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "common/clock.h"
#include "common/cuda_check.h"
#include "common/error.h"
#include "exec/box_copy.h"
#include "exec/cuda/cuda_memory.h"

namespace dynatrain {
namespace {

constexpr std::int64_t kCols = 8192;

void check(cudaError_t e, const char* what) { check_cuda(e, "bench_gpu_switch", what); }

std::uint32_t value_of(std::int64_t g) { return static_cast<std::uint32_t>(g) * 2654435761u + 12345u; }

vps::Box box2(std::int64_t r0, std::int64_t c0, std::int64_t r1, std::int64_t c1) {
  vps::Box b;
  b.ndim = 2;
  b.lo[0] = r0, b.lo[1] = c0, b.hi[0] = r1, b.hi[1] = c1;
  return b;
}

struct Args {
  double gib = 2.0;
  int repeat = 5;
  std::string out;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) DT_INPUT_ERROR("flag ", f, " needs a value; flags: --gib G, --repeat N, --out FILE");
    if (f == "--gib")
      a.gib = std::stod(argv[++i]);
    else if (f == "--repeat")
      a.repeat = std::stoi(argv[++i]);
    else if (f == "--out")
      a.out = argv[++i];
    else
      DT_INPUT_ERROR("unknown flag ", f, "; flags: --gib G, --repeat N, --out FILE");
  }
  if (!(a.gib > 0 && a.gib <= 64)) DT_INPUT_ERROR("--gib ", a.gib, " is not in (0, 64]");
  if (a.repeat < 1 || a.repeat > 100) DT_INPUT_ERROR("--repeat ", a.repeat, " is not in [1, 100]");
  return a;
}

// Seconds of `fn` on both processes at once (barrier, run, synchronise, barrier), the best of n.
template <typename Fn>
double best_of(comm::Transport& world, const exec::cuda::CudaMemory& mem, int n, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < n; ++i) {
    mem.synchronize();
    world.barrier();
    const auto t0 = Clock::now();
    fn();
    mem.synchronize();
    world.barrier();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// The first element of `dst` (storage of `box`) that is not value_of(its global index), or -1.
std::int64_t first_wrong(const std::vector<std::uint32_t>& dst, const vps::Box& box) {
  const std::int64_t w = box.extent(1);  // rows of box are consecutive global rows
  for (std::int64_t i = 0; i < box.numel(); ++i)
    if (dst[static_cast<std::size_t>(i)] != value_of((box.lo[0] + i / w) * kCols + box.lo[1] + i % w)) return i;
  return -1;
}

void write_results(const Args& a, const std::string& body) {
  const std::string path = a.out.empty() ? "bench/results/gpu_check.md" : a.out;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) DT_INPUT_ERROR("cannot write ", path);
  std::fputs(body.c_str(), f);
  if (std::fclose(f) != 0) DT_INPUT_ERROR("cannot write ", path);
  std::printf("wrote %s\n", path.c_str());
}

// One process's device memory: its source column half (cudaMalloc, so CUDA IPC can export it),
// its destination row half, and the copy bound's contiguous source of the same bytes.
struct State {
  std::int64_t rows = 0;
  vps::Box col_half[2], row_half[2];
  std::size_t half = 0;  // bytes of every buffer
  void *src = nullptr, *dst = nullptr, *flat = nullptr;
  ~State() { cudaFree(src), cudaFree(dst), cudaFree(flat); }
};

void make_state(State& s, const Args& a, int me) {
  s.rows = std::max<std::int64_t>(2, static_cast<std::int64_t>(a.gib * (1 << 30)) / (kCols * 4) / 2 * 2);
  s.col_half[0] = box2(0, 0, s.rows, kCols / 2), s.col_half[1] = box2(0, kCols / 2, s.rows, kCols);
  s.row_half[0] = box2(0, 0, s.rows / 2, kCols), s.row_half[1] = box2(s.rows / 2, 0, s.rows, kCols);
  s.half = static_cast<std::size_t>(s.rows * kCols / 2) * 4;
  check(cudaMalloc(&s.src, s.half), "cudaMalloc (source)");
  check(cudaMalloc(&s.dst, s.half), "cudaMalloc (destination)");
  check(cudaMalloc(&s.flat, s.half), "cudaMalloc (copy-bound source)");
  std::vector<std::uint32_t> host(static_cast<std::size_t>(s.col_half[me].numel()));
  const std::int64_t c0 = s.col_half[me].lo[1], w = kCols / 2;
  for (std::int64_t r = 0; r < s.rows; ++r)
    for (std::int64_t c = 0; c < w; ++c) host[static_cast<std::size_t>(r * w + c)] = value_of(r * kCols + c0 + c);
  check(cudaMemcpy(s.src, host.data(), s.half, cudaMemcpyHostToDevice), "cudaMemcpy (fill)");
  check(cudaMemcpy(s.flat, host.data(), s.half, cudaMemcpyHostToDevice), "cudaMemcpy (fill)");
}

struct Times {
  double first = 0, best = 0, bound = 0;
};

void report(const Args& a, const State& s, const Times& t) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const double gb = static_cast<double>(s.half) / 1e9;
  char line[512];
  std::snprintf(line, sizeof line, "| %.2f GB | %.2f GB | %.3f ms | %.3f ms | %.3f ms (%.0f GB/s) | %.2f |\n", 2 * gb,
                gb, t.first * 1e3, t.best * 1e3, t.bound * 1e3, 2 * gb / t.bound, t.best / t.bound);
  std::printf("switch %.3f ms (first %.3f ms), copy bound %.3f ms: switch / copy_bound = %.2f; every element checked\n",
              t.best * 1e3, t.first * 1e3, t.bound * 1e3, t.best / t.bound);
  char gib[32];
  std::snprintf(gib, sizeof gib, "%g", a.gib);
  std::string body = "# GPU check: a switch between two processes on one device against its copy bound\n\n";
  body += std::string("Command: `scripts/gpu-check.sh` (`mpirun -np 2 bench_gpu_switch --gib ") + gib + " --repeat " +
          std::to_string(a.repeat) + "`). Machine: " + prop.name + ", CUDA driver " + std::to_string(driver) +
          ". Date: " + date + ".\n\n";
  body +=
      "Two processes share device 0; each holds one column half of a [rows, 8192] matrix of 4-byte "
      "elements and builds one row half: a quarter kept from its own memory and a quarter read from "
      "the other's through CUDA IPC, both by the strided copy kernel (exec/cuda). Copy bound: the same "
      "bytes by cudaMemcpyAsync device-to-device, both processes at once. Best of the repeats; every "
      "destination element checked.\n\n";
  body += "| state | per process | first switch | switch | copy bound (both processes) | switch / copy_bound |\n";
  body += "|---|---|---|---|---|---|\n";
  body += line;
  write_results(a, body);
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  auto world = comm::MpiTransport::world();
  if (world->size() != 2) DT_INPUT_ERROR("bench_gpu_switch runs as 2 processes, not ", world->size());
  const int me = world->rank(), peer = 1 - me;
  exec::cuda::CudaMemory mem(0);  // both processes on device 0
  State s;
  make_state(s, a, me);
  cudaIpcMemHandle_t mine{}, theirs[2]{};
  check(cudaIpcGetMemHandle(&mine, s.src), "cudaIpcGetMemHandle");
  world->all_gather_bytes(&mine, theirs, sizeof mine);
  void* peer_src = nullptr;
  check(cudaIpcOpenMemHandle(&peer_src, theirs[peer], cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  const auto* own = static_cast<const std::byte*>(s.src);
  const auto* other = static_cast<const std::byte*>(peer_src);
  auto* out = static_cast<std::byte*>(s.dst);
  const vps::Box& d = s.row_half[me];
  auto switch_once = [&] {
    exec::copy_box(vps::intersect(s.col_half[me], d), own, s.col_half[me], out, d, 4, mem);
    exec::copy_box(vps::intersect(s.col_half[peer], d), other, s.col_half[peer], out, d, 4, mem);
  };
  Times t;
  t.first = best_of(*world, mem, 1, switch_once);
  t.best = best_of(*world, mem, a.repeat, switch_once);
  t.bound = best_of(*world, mem, a.repeat, [&] { mem.copy(out, static_cast<const std::byte*>(s.flat), s.half); });
  mem.zero(out, s.half);
  switch_once();  // the checked switch: into a zeroed destination
  mem.synchronize();
  std::vector<std::uint32_t> got(s.half / 4);
  check(cudaMemcpy(got.data(), s.dst, s.half, cudaMemcpyDeviceToHost), "cudaMemcpy (check)");
  const auto wrongs = comm::all_gather_values(*world, first_wrong(got, d));
  check(cudaIpcCloseMemHandle(peer_src), "cudaIpcCloseMemHandle");
  world->barrier();
  for (int r = 0; r < 2; ++r)
    if (wrongs[static_cast<std::size_t>(r)] >= 0)
      throw InvariantError("process " + std::to_string(r) + ": destination element " +
                           std::to_string(wrongs[static_cast<std::size_t>(r)]) + " is wrong after the switch");
  if (me == 0) report(a, s, t);
  return 0;
}

}  // namespace
}  // namespace dynatrain

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--device-count") == 0) {  // scripts/gpu-check.sh asks
    std::printf("%d\n", dynatrain::exec::cuda::device_count());
    return 0;
  }
  dynatrain::comm::MpiSession session(&argc, &argv);
  try {
    return dynatrain::run(argc, argv);
  } catch (const dynatrain::InputError& e) {  // every process finds it alike: one line
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::fprintf(stderr, "bench_gpu_switch: error: %s\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_switch: error: %s\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
