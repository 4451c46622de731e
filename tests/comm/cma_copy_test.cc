// Unit tests of comm/mpi/cma_copy.{h,cc}: descriptors, the writer choice, and cross-memory copies
// between run lists, with this process as the "remote" one (process_vm_readv / writev on the own
// pid) and with a forked child that has exited (PeerLostError). Every destination byte is checked
// against a pure function of its stream index.
#include "comm/mpi/cma_copy.h"

#include <gtest/gtest.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"

namespace dynatrain::comm::mpi_detail {
namespace {

std::byte stream_byte(std::size_t i) { return static_cast<std::byte>((i * 131 + 7) % 251); }

// Runs of `buf` that cover `total` bytes in pieces of 1..max_piece bytes, with gaps of `gap`
// bytes between them; the buffer must hold the span.
std::vector<ByteRun> spaced_runs(std::size_t total, std::size_t max_piece, std::size_t gap, std::size_t* span) {
  std::vector<ByteRun> runs;
  std::size_t at = 0, done = 0, k = 0;
  while (done < total) {
    const std::size_t n = std::min(total - done, 1 + (k++ * 7) % max_piece);
    runs.push_back({at, n});
    at += n + gap;
    done += n;
  }
  *span = at;
  return runs;
}

void fill_runs(std::vector<std::byte>& buf, const std::vector<ByteRun>& runs) {
  std::size_t i = 0;
  for (const ByteRun& r : runs)
    for (std::size_t b = 0; b < r.bytes; ++b) buf[r.offset + b] = stream_byte(i++);
}

// Every byte of `runs` is the stream byte of its position; every byte outside is `untouched`.
void expect_runs(const std::vector<std::byte>& buf, const std::vector<ByteRun>& runs, std::byte untouched) {
  std::vector<char> inside(buf.size(), 0);
  std::size_t i = 0;
  for (const ByteRun& r : runs) {
    for (std::size_t b = 0; b < r.bytes; ++b, ++i) {
      inside[r.offset + b] = 1;
      ASSERT_EQ(buf[r.offset + b], stream_byte(i)) << "stream byte " << i << " at offset " << r.offset + b;
    }
  }
  for (std::size_t o = 0; o < buf.size(); ++o) {
    if (inside[o]) continue;
    ASSERT_EQ(buf[o], untouched) << "byte " << o << " outside the runs was written";
  }
}

TEST(CmaCopy, DescriptorListsPidAddressesAndLengths) {
  std::vector<std::byte> buf(64);
  const std::vector<ByteRun> runs{{3, 5}, {20, 0}, {40, 17}};
  const auto desc = runs_descriptor(buf.data(), runs);
  ASSERT_EQ(desc.size(), 2 + 2 * runs.size());
  EXPECT_EQ(desc[0], static_cast<std::uint64_t>(getpid()));
  EXPECT_EQ(desc[1], runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(desc[2 + 2 * i], reinterpret_cast<std::uintptr_t>(buf.data() + runs[i].offset));
    EXPECT_EQ(desc[3 + 2 * i], runs[i].bytes);
  }
  EXPECT_EQ(descriptor_bytes(desc), 22u);
  EXPECT_TRUE(descriptor_well_formed(desc));
  EXPECT_FALSE(descriptor_well_formed({1}));
  EXPECT_FALSE(descriptor_well_formed({1, 2, 0, 4}));
}

TEST(CmaCopy, MergedRunCountJoinsContinuingRunsAndSkipsEmptyOnes) {
  const std::vector<ByteRun> runs{{0, 4}, {4, 4}, {8, 0}, {9, 1}, {10, 2}, {20, 1}};
  const auto count = merged_run_count(runs.size(), [&](std::size_t i) {
    return std::pair<std::uint64_t, std::uint64_t>{runs[i].offset, runs[i].bytes};
  });
  EXPECT_EQ(count, 3u);  // [0, 8), [9, 12), [20, 21)
  EXPECT_EQ(merged_run_count(0, [](std::size_t) { return std::pair<std::uint64_t, std::uint64_t>{0, 0}; }), 0u);
}

TEST(CmaCopy, SenderWritesOnlyWhenItsRunsAreFarMoreScattered) {
  std::vector<std::byte> buf(1 << 16);
  std::size_t span = 0;
  const auto scattered = spaced_runs(4096, 8, 3, &span);  // hundreds of separate runs
  const std::vector<ByteRun> one{{0, 4096}};
  EXPECT_TRUE(sender_should_write(runs_descriptor(buf.data(), scattered), one));
  EXPECT_FALSE(sender_should_write(runs_descriptor(buf.data(), one), scattered));
  EXPECT_FALSE(sender_should_write(runs_descriptor(buf.data(), scattered), scattered));
  // Below kWriteMinRuns the receiver reads, however uneven the counts.
  std::vector<ByteRun> few;
  for (std::size_t i = 0; i + 1 < kWriteMinRuns; ++i) few.push_back({2 * i, 1});
  EXPECT_FALSE(sender_should_write(runs_descriptor(buf.data(), few), one));
}

// Copies between two differently split run lists of the same total, both directions, through
// more iovecs than one call takes (kIovBatch), and checks every byte.
void round_trip(Copy direction, std::size_t total, std::size_t remote_piece, std::size_t local_piece) {
  std::size_t remote_span = 0, local_span = 0;
  const auto remote_runs = spaced_runs(total, remote_piece, 2, &remote_span);
  const auto local_runs = spaced_runs(total, local_piece, 1, &local_span);
  std::vector<std::byte> remote(remote_span, std::byte{0xEE}), local(local_span, std::byte{0xEE});
  if (direction == Copy::kRead)
    fill_runs(remote, remote_runs);
  else
    fill_runs(local, local_runs);
  copy_remote_runs(direction, runs_descriptor(remote.data(), remote_runs), local.data(), local_runs, "test");
  if (direction == Copy::kRead)
    expect_runs(local, local_runs, std::byte{0xEE});
  else
    expect_runs(remote, remote_runs, std::byte{0xEE});
}

TEST(CmaCopy, ReadsDescriptorRunsIntoLocalRuns) {
  round_trip(Copy::kRead, 100'003, 13, 1000);  // remote side scattered: > kIovBatch remote iovecs
  round_trip(Copy::kRead, 100'003, 1000, 13);  // local side scattered
  round_trip(Copy::kRead, 7, 7, 7);
}

TEST(CmaCopy, WritesLocalRunsIntoDescriptorRuns) {
  round_trip(Copy::kWrite, 100'003, 13, 1000);
  round_trip(Copy::kWrite, 100'003, 1000, 13);
}

TEST(CmaCopy, ContiguousNeighboursExtendOneIovec) {
  // Adjacent runs on both sides must still copy exactly (they merge into single iovecs).
  std::vector<ByteRun> remote_runs, local_runs;
  for (std::size_t i = 0; i < 3000; ++i) remote_runs.push_back({i * 3, 3});
  for (std::size_t i = 0; i < 9000; ++i) local_runs.push_back({i, 1});
  std::vector<std::byte> remote(9000), local(9000, std::byte{0xEE});
  fill_runs(remote, remote_runs);
  copy_remote_runs(Copy::kRead, runs_descriptor(remote.data(), remote_runs), local.data(), local_runs, "test");
  expect_runs(local, local_runs, std::byte{0xEE});
}

TEST(CmaCopy, GoneProcessIsPeerLostErrorNamingItsPid) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // reaped: the pid names no process now
  std::vector<std::byte> local(16);
  std::vector<std::uint64_t> desc{static_cast<std::uint64_t>(child), 1, 4096, 16};
  try {
    copy_remote_runs(Copy::kRead, desc, local.data(), {{0, 16}}, "rank 0: test");
    FAIL() << "no error for a gone process";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.pid(), child);
    EXPECT_NE(std::string(e.what()).find(std::to_string(child)), std::string::npos) << e.what();
  }
}

TEST(CmaCopy, BadRemoteAddressIsCommErrorNamingTheCall) {
  std::vector<std::byte> local(16);
  std::vector<std::uint64_t> desc{static_cast<std::uint64_t>(getpid()), 1, 8, 16};  // address 8: unmapped
  try {
    copy_remote_runs(Copy::kRead, desc, local.data(), {{0, 16}}, "rank 0: test");
    FAIL() << "no error for an unmapped address";
  } catch (const PeerLostError&) {
    FAIL() << "an unmapped address is not a lost peer";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("process_vm_readv of 16 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dynatrain::comm::mpi_detail
