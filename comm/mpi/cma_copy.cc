#include "comm/mpi/cma_copy.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace dynatrain::comm::mpi_detail {

using ::dynatrain::detail::concat;

std::vector<std::uint64_t> runs_descriptor(const void* base, const std::vector<ByteRun>& runs) {
  std::vector<std::uint64_t> desc;
  desc.reserve(2 + 2 * runs.size());
  desc.push_back(static_cast<std::uint64_t>(getpid()));
  desc.push_back(runs.size());
  for (const ByteRun& r : runs) {
    desc.push_back(reinterpret_cast<std::uintptr_t>(static_cast<const std::byte*>(base) + r.offset));
    desc.push_back(r.bytes);
  }
  return desc;
}

std::uint64_t descriptor_bytes(const std::vector<std::uint64_t>& desc) {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < desc[1]; ++i) bytes += desc[3 + 2 * i];
  return bytes;
}

bool descriptor_well_formed(const std::vector<std::uint64_t>& desc) {
  return desc.size() >= 2 && desc.size() == 2 + 2 * desc[1];
}

bool sender_should_write(const std::vector<std::uint64_t>& remote, const std::vector<ByteRun>& local) {
  const std::size_t theirs = merged_run_count(remote[1], [&](std::size_t i) {
    return std::pair<std::uint64_t, std::uint64_t>{remote[2 + 2 * i], remote[3 + 2 * i]};
  });
  const std::size_t ours = merged_run_count(local.size(), [&](std::size_t i) {
    return std::pair<std::uint64_t, std::uint64_t>{local[i].offset, local[i].bytes};
  });
  return theirs >= kWriteMinRuns && theirs > kWriteRatio * ours;
}

void copy_remote_runs(Copy direction, const std::vector<std::uint64_t>& desc, std::byte* base,
                      const std::vector<ByteRun>& runs, const std::string& where) {
  constexpr std::size_t kMaxCallBytes = std::size_t{1} << 30;
  const auto pid = static_cast<pid_t>(desc[0]);
  const std::size_t n_remote = desc[1];
  std::vector<iovec> local, remote;
  local.reserve(kIovBatch), remote.reserve(kIovBatch);
  std::size_t batch_bytes = 0;
  auto flush = [&] {
    if (local.empty()) return;
    const ssize_t got = direction == Copy::kRead
                            ? process_vm_readv(pid, local.data(), local.size(), remote.data(), remote.size(), 0)
                            : process_vm_writev(pid, local.data(), local.size(), remote.data(), remote.size(), 0);
    const char* call = direction == Copy::kRead ? "process_vm_readv" : "process_vm_writev";
    if (got < 0 && errno == ESRCH)  // the peer's process (or its memory) is gone: it was killed
      throw PeerLostError(pid, concat("mpi: ", where, ": pid ", pid, " ended during a direct ",
                                      direction == Copy::kRead ? "read" : "write"));
    if (got != static_cast<ssize_t>(batch_bytes))
      throw CommError(concat("mpi: ", where, ": ", call, " of ", batch_bytes, " bytes with pid ", pid, " returned ",
                             got, got < 0 ? concat(" (", std::strerror(errno), ")") : std::string()));
    local.clear(), remote.clear();
    batch_bytes = 0;
  };
  auto continues = [](const std::vector<iovec>& v, const void* at) {
    return !v.empty() && static_cast<const std::byte*>(v.back().iov_base) + v.back().iov_len == at;
  };
  std::size_t i = 0, j = 0, at_i = 0, at_j = 0;  // remote run, local run, bytes done in each
  while (i < n_remote && j < runs.size()) {
    const std::uint64_t r_addr = desc[2 + 2 * i], r_len = desc[3 + 2 * i];
    std::size_t n = std::min<std::size_t>(r_len - at_i, runs[j].bytes - at_j);
    n = std::min(n, kMaxCallBytes - batch_bytes);
    if (n > 0) {
      std::byte* here = base + runs[j].offset + at_j;
      auto* there = reinterpret_cast<std::byte*>(r_addr + at_i);
      bool extend_local = continues(local, here), extend_remote = continues(remote, there);
      if ((!extend_local && local.size() == kIovBatch) || (!extend_remote && remote.size() == kIovBatch)) {
        flush();
        extend_local = extend_remote = false;
      }
      if (extend_local)
        local.back().iov_len += n;
      else
        local.push_back({here, n});
      if (extend_remote)
        remote.back().iov_len += n;
      else
        remote.push_back({there, n});
      batch_bytes += n;
    }
    if (batch_bytes == kMaxCallBytes) flush();
    at_i += n, at_j += n;
    if (at_i == r_len) ++i, at_i = 0;
    if (at_j == runs[j].bytes) ++j, at_j = 0;
  }
  flush();
}

}  // namespace dynatrain::comm::mpi_detail
