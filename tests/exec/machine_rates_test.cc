// The machine's measured memory rates (exec/machine_rates.h) and the break-even they give for
// remapping a kept run instead of copying it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
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
  EXPECT_GT(r.measure_seconds, 0);
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
