#include "exec/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/error.h"
#include "exec/engine.h"

namespace dynatrain::exec {
namespace {
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older kernels refuse it (EINVAL)
#endif

std::atomic<std::uint64_t> g_calls{0}, g_bytes{0}, g_populated{0}, g_touched{0};
}  // namespace

ThpMode parse_thp_mode(const std::string& text) {
  const auto open = text.find('['), close = text.find(']');
  if (open != std::string::npos && close != std::string::npos && close > open) {
    const std::string mode = text.substr(open + 1, close - open - 1);
    if (mode == "always") return ThpMode::kAlways;
    if (mode == "madvise") return ThpMode::kMadvise;
    if (mode == "never") return ThpMode::kNever;
  }
  DT_INPUT_ERROR("transparent huge page mode \"", text, "\": expected one of always / madvise / never in brackets");
}

const char* thp_mode_name(ThpMode mode) {
  switch (mode) {
    case ThpMode::kAlways: return "always";
    case ThpMode::kMadvise: return "madvise";
    case ThpMode::kNever: break;
  }
  return "never";
}

ThpMode read_thp_mode(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ThpMode::kNever;
  std::string line;
  std::getline(in, line);
  return parse_thp_mode(line);
}

ThpMode thp_mode() {
  static std::once_flag once;
  static ThpMode mode = ThpMode::kNever;
  std::call_once(once, [] { mode = read_thp_mode("/sys/kernel/mm/transparent_hugepage/enabled"); });
  return mode;
}

PopulateWay make_resident_huge(std::byte* data, std::size_t bytes, bool force_touch) {
  DT_CHECK(reinterpret_cast<std::uintptr_t>(data) % kPageBytes == 0, "make_resident_huge of an unaligned region");
  if (bytes == 0) return PopulateWay::kPopulate;
  const auto lo = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (lo + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const std::uintptr_t last = (lo + bytes) / kHugePageBytes * kHugePageBytes;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);  // a hint
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (!force_touch && ::madvise(data, bytes, MADV_POPULATE_WRITE) == 0) {
    g_populated.fetch_add(bytes, std::memory_order_relaxed);
    return PopulateWay::kPopulate;
  }
  for (std::size_t at = 0; at < bytes; at += kPageBytes) data[at] = std::byte{0};  // a write: backed now
  g_touched.fetch_add(bytes, std::memory_order_relaxed);
  return PopulateWay::kTouch;
}

HugePageCounters huge_page_counters() {
  return {g_calls.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed),
          g_populated.load(std::memory_order_relaxed), g_touched.load(std::memory_order_relaxed)};
}

std::uint64_t huge_page_bytes_in(const std::vector<AddressRange>& ranges) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  std::uintptr_t start = 0, end = 0;
  double total = 0;
  while (std::getline(in, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream fields(line.substr(14));
      std::uint64_t kib = 0;
      fields >> kib;
      if (kib == 0 || end <= start) continue;
      for (const auto& [lo, hi] : ranges) {
        const std::uintptr_t from = std::max(start, reinterpret_cast<std::uintptr_t>(lo));
        const std::uintptr_t to = std::min(end, reinterpret_cast<std::uintptr_t>(hi));
        if (to > from)
          total += static_cast<double>(kib << 10) * static_cast<double>(to - from) / static_cast<double>(end - start);
      }
    } else if (const auto sp = line.find(' '); sp != std::string::npos && sp > 0 && line[sp - 1] != ':') {
      // A mapping's first line ("start-end perms ..."); field lines start with "Name:".
      std::istringstream range(line);
      char dash = 0;
      range >> std::hex >> start >> dash >> end;
    }
  }
  return static_cast<std::uint64_t>(total);
}

}  // namespace dynatrain::exec
