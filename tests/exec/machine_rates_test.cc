// The machine's measured memory rates (exec/machine_rates.h) and the break-even they give for
// remapping a kept run instead of copying it.
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace dynatrain::exec
