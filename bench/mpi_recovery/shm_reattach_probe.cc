// The other side of elastic recovery: a fast restart that reattaches the survivors' state. State
// kept in POSIX shared memory (shm_open) outlives a process killed with SIGKILL; a new process
// maps it again. This probe measures, for one segment of N MiB:
//   fill     a child creates the segment and writes every byte (first touch of fresh pages);
//   kill     the child SIGKILLs itself once the segment is full;
//   attach   the parent (the "restarted" process) shm_open + mmap of the segment;
//   verify   one read pass over the mapping, every 8-byte word checked against a pure function
//            of its index (a content check, and the cost of touching the reattached pages);
//   populate a second mapping with MAP_POPULATE (page tables built up front, no copy);
//   copy     for scale, a memcpy of the segment into fresh memory (what a restart that had to
//            receive the state over shared memory would at least pay).
//   bench_mpi_recovery_shm [MiB]   (default 1024)
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::uint64_t word(std::size_t i) { return i * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull; }

constexpr const char* kName = "/dynatrain-recovery-probe";

[[noreturn]] void fill_and_die(std::size_t bytes) {
  const int fd = shm_open(kName, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) _exit(2);
  auto* p = static_cast<std::uint64_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) _exit(3);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < bytes / 8; ++i) p[i] = word(i);
  std::printf("fill    %.3f s (%.2f GB/s, fresh pages, by the process that is then SIGKILLed)\n", seconds_since(start),
              bytes / seconds_since(start) / 1e9);
  std::fflush(stdout);
  raise(SIGKILL);
  _exit(4);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const std::size_t bytes = mib << 20;
  shm_unlink(kName);
  const pid_t child = fork();
  if (child == 0) fill_and_die(bytes);
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("kill    the filling process ended by signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  auto start = Clock::now();
  const int fd = shm_open(kName, O_RDONLY, 0);
  auto* p = fd < 0 ? MAP_FAILED : mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    std::printf("attach  FAILED: the segment did not survive\n");
    return 1;
  }
  std::printf("attach  %.6f s (shm_open + mmap of %zu MiB)\n", seconds_since(start), mib);
  const auto* words = static_cast<const std::uint64_t*>(p);
  start = Clock::now();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < bytes / 8; ++i) bad += words[i] != word(i);
  const double verify = seconds_since(start);
  std::printf("verify  %.3f s (%.2f GB/s), %zu of %zu words wrong\n", verify, bytes / verify / 1e9, bad, bytes / 8);
  start = Clock::now();
  void* again = mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  std::printf("populate %.3f s (a second mmap with MAP_POPULATE: the page tables alone)\n", seconds_since(start));
  if (again != MAP_FAILED) munmap(again, bytes);
  std::vector<char> fresh(bytes);
  start = Clock::now();
  std::memcpy(fresh.data(), p, bytes);
  const double copy = seconds_since(start);
  std::printf("copy    %.3f s (%.2f GB/s, into fresh memory)\n", copy, bytes / copy / 1e9);
  munmap(p, bytes);
  close(fd);
  shm_unlink(kName);
  return bad == 0 ? 0 : 1;
}
