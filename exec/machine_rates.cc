#include "exec/machine_rates.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "exec/engine.h"

namespace dynatrain::exec {
namespace {

constexpr std::size_t kHugeBytes = 2 << 20;
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older kernels refuse it (EINVAL)
#endif

// `bytes` of fresh address space, 2 MiB-aligned, no page touched; unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(std::size_t bytes) : span_(bytes + kHugeBytes), bytes_(bytes) {
    raw_ = ::mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw_ == MAP_FAILED) throw std::bad_alloc();
    const auto at = (reinterpret_cast<std::uintptr_t>(raw_) + kHugeBytes - 1) / kHugeBytes * kHugeBytes;
    data_ = reinterpret_cast<std::byte*>(at);
  }
  ~Mapping() { ::munmap(raw_, span_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t span_, bytes_;
  void* raw_ = nullptr;
  std::byte* data_ = nullptr;
};

template <typename Fn>
double timed(Fn&& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::max(seconds_since(t0), 1e-9);
}

double warm_copy_rate(std::size_t n) {
  Mapping a(n), b(n);
  std::memset(a.data(), 1, n);
  std::memset(b.data(), 2, n);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) best = std::min(best, timed([&] { std::memcpy(b.data(), a.data(), n); }));
  return static_cast<double>(n) / best;
}

// A fresh mapping made resident by `advice` (none: by the write itself), then written once.
double fresh_rate(std::size_t n, int huge_advice, int populate_advice) {
  Mapping m(n);
  if (huge_advice >= 0 && ::madvise(m.data(), n, huge_advice) != 0) return 0;
  const double s = timed([&] {
    if (populate_advice >= 0 && ::madvise(m.data(), n, populate_advice) != 0) return;
    std::memset(m.data(), 3, n);
  });
  if (populate_advice >= 0 && ::madvise(m.data(), kPageBytes, populate_advice) != 0) return 0;
  return static_cast<double>(n) / s;
}

// Seconds per remapped run of `run` bytes of warm pages, as the pool moves them: one mremap into
// empty address space (the vacated range stays mapped, empty) and, when its block is released,
// a share of the munmap calls of the vacated ranges (every other one here: they cannot merge).
// A kernel that refuses the remap (no MREMAP_DONTUNMAP before Linux 5.7) makes it never worth it.
double remap_seconds_per_call(std::size_t n, std::size_t run) {
  Mapping from(n), to(n);
  std::memset(from.data(), 4, n);
  bool refused = false;
  const double s = timed([&] {
    for (std::size_t at = 0; at < n && !refused; at += run)
      refused = ::mremap(from.data() + at, run, run, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                         to.data() + at) == MAP_FAILED;
    for (std::size_t at = 0; at < n; at += 2 * run) ::munmap(from.data() + at, run);
  });
  return refused ? 1e30 : s / static_cast<double>(n / run);
}

}  // namespace

std::uint64_t remap_break_even(double call_seconds, double byte_seconds, double copy_bytes_per_s) {
  const double copy_byte_seconds = 1.0 / copy_bytes_per_s;
  if (!(copy_byte_seconds > byte_seconds)) return UINT64_MAX;  // a remap never catches up
  const double bytes = call_seconds / (copy_byte_seconds - byte_seconds);
  if (bytes >= 1e15) return UINT64_MAX;
  const auto pages = static_cast<std::uint64_t>(std::ceil(std::max(bytes, 1.0) / kPageBytes));
  return pages * kPageBytes;
}

MachineRates measure_machine_rates(std::size_t bytes) {
  if (bytes < 2 * kHugeBytes || bytes % kHugeBytes != 0)
    DT_INPUT_ERROR("machine rates over ", bytes, " bytes: valid sizes are multiples of 2 MiB, at least 4 MiB");
  const auto t0 = Clock::now();
  MachineRates r;
  r.warm_copy_bytes_per_s = warm_copy_rate(bytes);
  r.fresh_write_bytes_per_s = fresh_rate(bytes, -1, -1);
  r.populate_bytes_per_s = fresh_rate(bytes, -1, MADV_POPULATE_WRITE);
  r.huge_populate_bytes_per_s = fresh_rate(bytes, MADV_HUGEPAGE, MADV_POPULATE_WRITE);
  constexpr std::size_t kSmallRun = 64 << 10;
  const double small = remap_seconds_per_call(bytes, kSmallRun);
  const double large = remap_seconds_per_call(bytes, kHugeBytes);
  // Fit call + bytes * per_byte through the two sizes (both clamped at zero: noise).
  r.remap_byte_seconds = std::max(0.0, (large - small) / static_cast<double>(kHugeBytes - kSmallRun));
  r.remap_call_seconds = std::max(0.0, small - r.remap_byte_seconds * kSmallRun);
  r.min_remap_bytes = remap_break_even(r.remap_call_seconds, r.remap_byte_seconds, r.warm_copy_bytes_per_s);
  r.measure_seconds = seconds_since(t0);
  return r;
}

ResidentWay fastest_resident_way(const MachineRates& r) {
  if (r.huge_populate_bytes_per_s > std::max(r.populate_bytes_per_s, r.fresh_write_bytes_per_s))
    return ResidentWay::kHugePopulate;
  if (r.populate_bytes_per_s > r.fresh_write_bytes_per_s) return ResidentWay::kPopulate;
  return ResidentWay::kTouch;
}

ResidentWay fastest_small_page_way(const MachineRates& r) {
  return r.populate_bytes_per_s > r.fresh_write_bytes_per_s ? ResidentWay::kPopulate : ResidentWay::kTouch;
}

const char* resident_way_name(ResidentWay way) {
  switch (way) {
    case ResidentWay::kHugePopulate: return "huge pages + populate";
    case ResidentWay::kPopulate: return "populate";
    case ResidentWay::kTouch: break;
  }
  return "touch";
}

void make_resident(std::byte* data, std::size_t bytes, ResidentWay way) {
  if (way == ResidentWay::kHugePopulate) ::madvise(data, bytes, MADV_HUGEPAGE);  // a hint: refusal is fine
  if (way != ResidentWay::kTouch && ::madvise(data, bytes, MADV_POPULATE_WRITE) == 0) return;
  for (std::size_t at = 0; at < bytes; at += kPageBytes) data[at] = std::byte{0};  // a write: backed now
}

ResidentWay make_resident_measured(std::byte* data, std::size_t bytes, const MachineRates& rates) {
  constexpr std::size_t kPiece = 32 << 20;
  ResidentWay way = fastest_resident_way(rates);
  const double fallback_rate = std::max(rates.populate_bytes_per_s, rates.fresh_write_bytes_per_s);
  for (std::size_t at = 0; at < bytes; at += kPiece) {
    const std::size_t n = std::min(kPiece, bytes - at);
    const double s = timed([&] { make_resident(data + at, n, way); });
    if (way == ResidentWay::kHugePopulate && static_cast<double>(n) / s < fallback_rate)
      way = rates.populate_bytes_per_s > rates.fresh_write_bytes_per_s ? ResidentWay::kPopulate : ResidentWay::kTouch;
  }
  return way;
}

ProcessUsage process_usage() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return {static_cast<double>(u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_stime.tv_usec),
          static_cast<std::uint64_t>(u.ru_minflt) + static_cast<std::uint64_t>(u.ru_majflt)};
}

namespace {

// The shared measurement (machine_rates.h): one file a user, in tmpfs, naming what it is valid
// for on its first line; rewritten under an exclusive flock by the process that measures.
constexpr int kSharedFormat = 1;
constexpr double kSharedMaxAgeSeconds = 3600;
constexpr double kSharedLockWaitSeconds = 10;  // a holder stopped or slow: measure alone after this

std::string first_line_of(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// What a measurement is valid for: this boot of this machine and its huge-page setting.
std::string shared_key() {
  return "dynatrain-machine-rates " + std::to_string(kSharedFormat) + " " +
         first_line_of("/proc/sys/kernel/random/boot_id") + " " +
         first_line_of("/sys/kernel/mm/transparent_hugepage/enabled");
}

std::string shared_path() {
  const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/dynatrain-machine-rates-" + std::to_string(::getuid());
}

bool read_shared(int fd, const std::string& key, MachineRates& r) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > 4096) return false;
  const double age = static_cast<double>(::time(nullptr) - st.st_mtime);
  if (age > kSharedMaxAgeSeconds) return false;
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  if (::pread(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return false;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != key) return false;
  return static_cast<bool>(in >> r.warm_copy_bytes_per_s >> r.fresh_write_bytes_per_s >> r.populate_bytes_per_s >>
                           r.huge_populate_bytes_per_s >> r.remap_call_seconds >> r.remap_byte_seconds >>
                           r.min_remap_bytes >> r.measure_seconds);
}

void write_shared(int fd, const std::string& key, const MachineRates& r) {
  std::ostringstream out;
  out.precision(17);
  out << key << "\n"
      << r.warm_copy_bytes_per_s << " " << r.fresh_write_bytes_per_s << " " << r.populate_bytes_per_s << " "
      << r.huge_populate_bytes_per_s << " " << r.remap_call_seconds << " " << r.remap_byte_seconds << " "
      << r.min_remap_bytes << " " << r.measure_seconds << "\n";
  const std::string text = out.str();
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, text.data(), text.size(), 0);  // best effort: a cache
}

bool lock_within(int fd, double seconds) {
  const auto t0 = Clock::now();
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || seconds_since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

MachineRates shared_machine_rates(const std::string& path, const std::function<MachineRates()>& measure) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return measure();
  if (!lock_within(fd, kSharedLockWaitSeconds)) {
    ::close(fd);
    return measure();
  }
  MachineRates r;
  const std::string key = shared_key();
  if (read_shared(fd, key, r)) {
    r.shared = true;
  } else {
    r = measure();
    write_shared(fd, key, r);
  }
  ::close(fd);  // releases the lock
  return r;
}

const MachineRates& machine_rates() {
  static std::once_flag once;
  static MachineRates rates;
  std::call_once(once, [] {
    const auto measure = [] { return measure_machine_rates(32 << 20); };
    const char* mode = std::getenv("DT_MACHINE_RATES");
    rates =
        mode != nullptr && std::string(mode) == "measure" ? measure() : shared_machine_rates(shared_path(), measure);
  });
  return rates;
}

}  // namespace dynatrain::exec
