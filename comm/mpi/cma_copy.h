// Cross-memory attach (process_vm_readv / process_vm_writev) between the runs of two processes:
// the byte-moving half of the MPI backend's runs protocol, free of MPI so it is tested alone.
//
// A runs descriptor is (pid, n, (address, length) x n): what one process tells another about
// `runs` of its buffer at `base`, in list order. Invariants:
//  * copy_remote_runs moves the stream of the descriptor's runs to or from the stream of the
//    local runs, byte i to byte i, for min(total of both) bytes; callers compare the totals
//    first (descriptor_bytes against runs_bytes).
//  * Each call builds its local and its remote iovec list apart, a piece that continues a side's
//    last iovec extending it; a call ends when either list holds kIovBatch (IOV_MAX) iovecs or at
//    1 GiB (Linux moves at most about 2 GiB in one call).
//  * A peer process that is gone (ESRCH) is PeerLostError naming its pid; any other short or
//    failed call is CommError naming the call, the bytes, the pid and errno's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm::mpi_detail {

constexpr std::size_t kIovBatch = 1024;  // IOV_MAX on Linux
// The receiver asks the sender to write when the sender's runs, adjacent ones merged, are more
// than this many times its own (and at least kWriteMinRuns).
constexpr std::size_t kWriteRatio = 2, kWriteMinRuns = 64;

// (pid of this process, n, (address, length) x n) of runs at `base`.
std::vector<std::uint64_t> runs_descriptor(const void* base, const std::vector<ByteRun>& runs);

// Total bytes of a descriptor's runs.
std::uint64_t descriptor_bytes(const std::vector<std::uint64_t>& desc);

// Whether `desc` has the form (pid, n, 2n words).
bool descriptor_well_formed(const std::vector<std::uint64_t>& desc);

// Runs after merging the ones that continue each other (what the kernel pins): run(i) gives
// the (start, length) of run i of `count`; empty runs do not count.
template <typename Run>
std::size_t merged_run_count(std::size_t count, Run run) {
  std::size_t n = 0;
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto [start, len] = run(i);
    if (len == 0) continue;
    if (n == 0 || start != end) ++n;
    end = start + len;
  }
  return n;
}

// The copy is made by the side with the more scattered runs (its local list, pinned locally):
// true when the sender (`remote`) should write into the receiver's `local` runs rather than the
// receiver read.
bool sender_should_write(const std::vector<std::uint64_t>& remote, const std::vector<ByteRun>& local);

enum class Copy { kRead, kWrite };

// kRead: the descriptor's runs (another process's) into the local runs at `base`; kWrite: the
// local runs into the descriptor's. `where` starts every error message.
void copy_remote_runs(Copy direction, const std::vector<std::uint64_t>& desc, std::byte* base,
                      const std::vector<ByteRun>& runs, const std::string& where);

}  // namespace dynatrain::comm::mpi_detail
