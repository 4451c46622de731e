// Transparent huge pages for state memory: the kernel's mode, and making a region resident in
// 2 MiB pages ahead of use.
//
// On the target machines (virtual machines whose kernel hands freed memory back to the host) a
// first write into fresh 4 KiB pages runs at about 0.4 GB/s, MADV_POPULATE_WRITE at about
// 1 GB/s, and MADV_HUGEPAGE + MADV_POPULATE_WRITE at about 13 GB/s: the kernel zeroes and maps
// a 2 MiB page in one step. State in 2 MiB pages also costs the exchange (cross-memory reads pin
// pages) and copies 512x fewer page-table entries (exec/README.md, "Huge pages").
//
//   thp_mode()            /sys/kernel/mm/transparent_hugepage/enabled, read once per process
//                         (always / madvise / never; an absent or unreadable file is never)
//   huge_span()           a region widened to the 2 MiB pages it touches
//   make_resident_huge()  MADV_HUGEPAGE over the 2 MiB pages of a region, then MADV_POPULATE_WRITE
//                         where the kernel has it (Linux 5.14), else a write to one byte a page;
//                         counted (huge_page_counters)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dynatrain::exec {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

enum class ThpMode : std::uint8_t { kNever, kMadvise, kAlways };

// The text of the `enabled` file ("always [madvise] never": the bracketed word is the mode).
// InputError naming the text and the valid modes when no bracketed mode is found.
ThpMode parse_thp_mode(const std::string& text);
const char* thp_mode_name(ThpMode mode);  // "never", "madvise", "always"
// The mode read from `path` (kNever when it cannot be opened).
ThpMode read_thp_mode(const std::string& path);
// This process's mode: read_thp_mode of the kernel's file, on the first call (thread-safe).
ThpMode thp_mode();

// Rounds `bytes` up to whole 2 MiB pages.
constexpr std::size_t round_up_huge(std::size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

// How a region was made resident.
enum class PopulateWay : std::uint8_t { kPopulate, kTouch };
// Advises [data, data + bytes) MADV_HUGEPAGE (the 2 MiB pages inside it; a refusal is only a
// lost hint) and makes it resident: MADV_POPULATE_WRITE, or with `force_touch` or where the
// kernel refuses it, a write of one byte a page (writes zero: the region's contents are
// unspecified afterwards). `data` must be page-aligned. Returns the way taken.
PopulateWay make_resident_huge(std::byte* data, std::size_t bytes, bool force_touch = false);

// Process-wide counts of make_resident_huge (relaxed atomics behind them).
struct HugePageCounters {
  std::uint64_t calls = 0, bytes = 0, populated_bytes = 0, touched_bytes = 0;
};
HugePageCounters huge_page_counters();

// Bytes of the address ranges [first, second) (not overlapping) that /proc/self/smaps reports
// in huge pages: AnonHugePages of each kernel mapping, in proportion where a mapping reaches
// beyond a range (so approximate there); 0 where smaps cannot be read.
using AddressRange = std::pair<const std::byte*, const std::byte*>;
std::uint64_t huge_page_bytes_in(const std::vector<AddressRange>& ranges);

}  // namespace dynatrain::exec
