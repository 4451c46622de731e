// MachineRates: what this machine does with state memory, measured once per machine and boot
// (32 MiB of each way: 0.1 s on a machine whose fresh pages are fast, 0.6-1.5 s where they are
// not), so the engine chooses its paths by measurement instead of by what was fast on another
// machine. On some virtual machines a page's first write, a page
// remap or a cross-memory read is 10-20x slower than on others (exec/README.md, "Measured path
// choice"); a copy between warm buffers runs at memory speed everywhere.
//
//   warm copy        memcpy between two buffers written before (the cost of a copied keep)
//   fresh write      first write into a fresh mapping (the kernel zeroes and maps each page)
//   populate         MADV_POPULATE_WRITE of a fresh mapping (0 where the kernel lacks it)
//   huge populate    MADV_HUGEPAGE + MADV_POPULATE_WRITE (0 where either is refused)
//   remap            mremap of warm pages in runs of 64 KiB and of 2 MiB, fitted as a cost per
//                    call plus a cost per byte; min_remap_bytes is the shortest run whose remap
//                    is measured faster than copying it (UINT64_MAX: never)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace dynatrain::exec {

struct MachineRates {
  double warm_copy_bytes_per_s = 0;
  double fresh_write_bytes_per_s = 0;
  double populate_bytes_per_s = 0;       // 0: MADV_POPULATE_WRITE not available
  double huge_populate_bytes_per_s = 0;  // 0: transparent huge pages not available
  double remap_call_seconds = 0;         // fixed cost of one mremap call
  double remap_byte_seconds = 0;         // cost per byte moved beyond that
  std::uint64_t min_remap_bytes = UINT64_MAX;
  double measure_seconds = 0;  // what the measurement took
  bool shared = false;         // read from this machine's shared measurement (machine_rates())
};

// What the process has cost the kernel so far (getrusage, all its threads): system time and page
// faults (minor + major). A switch reports the difference over its pause (TransitionStats); on a
// loaded machine these move less than wall time.
struct ProcessUsage {
  double system_seconds = 0;
  std::uint64_t page_faults = 0;
};
ProcessUsage process_usage();

// How fresh pages are made resident ahead of use (the pool's prefault): a write a page, one
// MADV_POPULATE_WRITE, or MADV_HUGEPAGE then MADV_POPULATE_WRITE (2 MiB pages where transparent
// huge pages are in `madvise` or `always` mode). fastest_resident_way picks the fastest one
// measured here; make_resident falls back to writing a page at a time where the kernel refuses.
enum class ResidentWay : std::uint8_t { kTouch, kPopulate, kHugePopulate };
ResidentWay fastest_resident_way(const MachineRates& rates);
// The faster of kPopulate and kTouch measured here (the pool's prefault without huge pages).
ResidentWay fastest_small_page_way(const MachineRates& rates);
const char* resident_way_name(ResidentWay way);  // "touch", "populate", "huge pages + populate"
void make_resident(std::byte* data, std::size_t bytes, ResidentWay way);
// make_resident over 32 MiB pieces, starting with the fastest way measured here and leaving huge
// pages for plain populate (or a write a page) as soon as a piece runs slower than that fallback
// was measured: huge pages can turn slow when free 2 MiB pages run out and the kernel compacts.
// Returns the way of the last piece.
ResidentWay make_resident_measured(std::byte* data, std::size_t bytes, const MachineRates& rates);

// The rates of this process's machine, on the first call (thread-safe), then kept. Shared by the
// processes of one user on the machine: the first to call measures, under an exclusive lock on
// /dev/shm/dynatrain-machine-rates-UID (/tmp without /dev/shm), and writes the rates there with
// the boot id and the transparent-huge-page setting they were measured under; the others wait
// for the lock and read them, while under an hour old (an older or other key: measured again).
// Processes starting together so measure once instead of each other's contention. A lock held
// for more than 10 s (its holder stopped), a file that cannot be opened, or
// DT_MACHINE_RATES=measure: this process measures for itself.
const MachineRates& machine_rates();

// machine_rates()'s sharing over the file at `path`: the rates found there (shared = true) when
// the file names this boot and huge-page setting and is under an hour old, else `measure()`'s,
// written there. Measures without the file when it cannot be opened or locked within 10 s.
MachineRates shared_machine_rates(const std::string& path, const std::function<MachineRates()>& measure);

// One measurement over buffers of `bytes` (a multiple of 2 MiB, at least 4 MiB; InputError
// otherwise); not cached.
MachineRates measure_machine_rates(std::size_t bytes);

// The shortest run whose remap (call + bytes * per byte) beats a copy at `copy_bytes_per_s`:
// UINT64_MAX when it never does, rounded up to whole pages otherwise.
std::uint64_t remap_break_even(double call_seconds, double byte_seconds, double copy_bytes_per_s);

}  // namespace dynatrain::exec
