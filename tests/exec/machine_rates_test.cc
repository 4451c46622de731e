// The machine's measured memory rates (exec/machine_rates.h) and the break-even they give for
// remapping a kept run instead of copying it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "exec/engine.h"
#include "exec/machine_rates.h"

namespace dynatrain::exec {
namespace {

TEST(MachineRates, BreakEvenIsWhereARemapBeatsACopy) {
  // 10 us a call, free bytes, copies at 10 GB/s: a remap wins from 100 KB on (whole pages).
  EXPECT_EQ(remap_break_even(10e-6, 0, 10e9), 25 * kPageBytes);  // 100,000 bytes -> 24.4 -> 25 pages
  // Bytes as dear as a copy's: never.
  EXPECT_EQ(remap_break_even(1e-6, 1e-10, 10e9), UINT64_MAX);
  EXPECT_EQ(remap_break_even(1e-6, 2e-10, 10e9), UINT64_MAX);
  // Calls free: every page.
  EXPECT_EQ(remap_break_even(0, 0, 10e9), kPageBytes);
  // A slower copy lowers the break-even.
  EXPECT_LT(remap_break_even(10e-6, 0, 1e9), remap_break_even(10e-6, 0, 10e9));
}

TEST(MachineRates, MeasuredOnceAndConsistent) {
  const MachineRates& r = machine_rates();
  EXPECT_EQ(&r, &machine_rates());  // cached
  EXPECT_GT(r.warm_copy_bytes_per_s, 0);
  EXPECT_GT(r.fresh_write_bytes_per_s, 0);
  EXPECT_GE(r.remap_call_seconds, 0);
  EXPECT_EQ(r.min_remap_bytes, remap_break_even(r.remap_call_seconds, r.remap_byte_seconds, r.warm_copy_bytes_per_s));
  EXPECT_GT(r.measure_seconds, 0);  // its own or the shared one's
}

// The rates one process measured are what the next reads from the shared file; a file that
// names another boot or setting, or holds garbage, is measured again and rewritten.
TEST(MachineRates, SharedFileIsMeasuredOnceThenRead) {
  const std::string path = ::testing::TempDir() + "machine-rates-shared-" + std::to_string(::getpid());
  std::remove(path.c_str());
  int measured = 0;
  const auto measure = [&] {
    MachineRates r;
    r.warm_copy_bytes_per_s = 1e10 + measured, r.fresh_write_bytes_per_s = 0.25e9, r.populate_bytes_per_s = 0.5e9;
    r.huge_populate_bytes_per_s = 7e9, r.remap_call_seconds = 3.5e-5, r.remap_byte_seconds = 1.25e-11;
    r.min_remap_bytes = 1269760, r.measure_seconds = 0.5;
    ++measured;
    return r;
  };
  const MachineRates first = shared_machine_rates(path, measure);
  const MachineRates second = shared_machine_rates(path, measure);
  EXPECT_EQ(measured, 1);
  EXPECT_FALSE(first.shared);
  EXPECT_TRUE(second.shared);
  EXPECT_EQ(second.warm_copy_bytes_per_s, first.warm_copy_bytes_per_s);
  EXPECT_EQ(second.remap_byte_seconds, first.remap_byte_seconds);
  EXPECT_EQ(second.min_remap_bytes, first.min_remap_bytes);
  for (const char* stale :
       {"dynatrain-machine-rates 1 another-boot always [madvise] never\n1 2 3 4 5 6 7 8\n", "garbage"}) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(stale, f);
    std::fclose(f);
    const MachineRates again = shared_machine_rates(path, measure);
    EXPECT_FALSE(again.shared) << stale;
    EXPECT_EQ(again.warm_copy_bytes_per_s, 1e10 + measured - 1) << stale;
  }
  EXPECT_EQ(measured, 3);
  EXPECT_TRUE(shared_machine_rates(path, measure).shared);  // rewritten by the last measurement
  std::remove(path.c_str());
  // A path that cannot be opened: measured, not shared.
  EXPECT_FALSE(shared_machine_rates("/nonexistent-dir/rates", measure).shared);
  EXPECT_EQ(measured, 4);
}

TEST(MachineRates, RefusesSizesItCannotMeasure) {
  EXPECT_THROW(measure_machine_rates(1 << 20), InputError);
  EXPECT_THROW(measure_machine_rates((4 << 20) + 4096), InputError);
}

TEST(MachineRates, ProcessUsageCountsFaults) {
  const ProcessUsage u0 = process_usage();
  const MachineRates r = measure_machine_rates(4 << 20);  // first writes of fresh pages
  const ProcessUsage u1 = process_usage();
  EXPECT_GT(u1.page_faults, u0.page_faults);
  EXPECT_GE(u1.system_seconds, u0.system_seconds);
  EXPECT_GT(r.warm_copy_bytes_per_s, 0);
}

TEST(MachineRates, ResidentWayIsTheFastestMeasured) {
  MachineRates r;
  r.fresh_write_bytes_per_s = 1e9, r.populate_bytes_per_s = 2e9, r.huge_populate_bytes_per_s = 10e9;
  EXPECT_EQ(fastest_resident_way(r), ResidentWay::kHugePopulate);
  r.huge_populate_bytes_per_s = 0.1e9;  // compaction stalls: slower than populate
  EXPECT_EQ(fastest_resident_way(r), ResidentWay::kPopulate);
  r.populate_bytes_per_s = 0;  // the kernel lacks MADV_POPULATE_WRITE
  EXPECT_EQ(fastest_resident_way(r), ResidentWay::kTouch);
}

TEST(MachineRates, MadeResidentEveryWayKeepsEveryByteWritable) {
  constexpr std::size_t kBytes = 4 << 20;
  for (ResidentWay way : {ResidentWay::kTouch, ResidentWay::kPopulate, ResidentWay::kHugePopulate}) {
    std::vector<std::byte> want(kBytes);
    auto* p = static_cast<std::byte*>(std::aligned_alloc(2 << 20, kBytes));
    ASSERT_NE(p, nullptr);
    make_resident(p, kBytes, way);
    for (std::size_t i = 0; i < kBytes; ++i) want[i] = p[i] = static_cast<std::byte>((i * 131) >> 3);
    EXPECT_EQ(std::memcmp(p, want.data(), kBytes), 0) << resident_way_name(way);
    std::free(p);
  }
  // The measured variant ends on one of the ways and leaves the memory usable.
  MachineRates r;
  r.fresh_write_bytes_per_s = 1e9, r.populate_bytes_per_s = 1e18, r.huge_populate_bytes_per_s = 1e19;  // falls back
  auto* p = static_cast<std::byte*>(std::aligned_alloc(2 << 20, 2 * kBytes));
  EXPECT_EQ(make_resident_measured(p, 2 * kBytes, r), ResidentWay::kPopulate);
  p[2 * kBytes - 1] = std::byte{7};
  EXPECT_EQ(p[2 * kBytes - 1], std::byte{7});
  std::free(p);
}

}  // namespace
}  // namespace dynatrain::exec
