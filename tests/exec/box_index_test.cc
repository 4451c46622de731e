// The index math shared by the host box copy and the device kernels (exec/box_index.h), tested
// on the host: random boxes in 1-4 dims and odd element sizes; every element's bytes checked
// against a pure function of its global index, for the host loop (RowCursor), random access
// (row_offsets) and the kernel's unit map (unit_offsets) run element by element on the CPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "exec/box_copy.h"
#include "exec/box_index.h"
#include "tests/exec/box_cases.h"

namespace dynatrain::exec {
namespace {

using test::content;
using test::expect_copied;
using test::filled;

TEST(BoxIndex, CursorAndRandomAccessAgreeOnEveryRow) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const test::BoxCase bc = test::random_box_case(rng, 1 + trial % 4, 7);
    const vps::Box &s = bc.src, &t = bc.dst, &q = bc.q;
    if (q.empty()) continue;
    const StridedRuns r = strided_runs(q, s, t, 4);
    ASSERT_EQ(r.rows * r.run_bytes, q.numel() * 4) << q.str();
    RowCursor cur(r);
    std::int64_t row = 0;
    do {
      std::int64_t so = -1, dof = -1;
      row_offsets(r, row, so, dof);
      ASSERT_EQ(cur.src, so) << "row " << row << " of " << q.str();
      ASSERT_EQ(cur.dst, dof) << "row " << row << " of " << q.str();
      ++row;
    } while (cur.next());
    EXPECT_EQ(row, r.rows) << q.str();
  }
}

TEST(BoxIndex, KernelUnitMapCopiesEveryElementOnce) {
  std::mt19937 rng(5);
  const std::size_t elems[] = {1, 2, 4, 8, 12, 16};
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t elem = elems[trial % 6];
    const std::size_t pad = trial % 5 == 0 ? 1 : 0;  // misaligned storages: narrower units
    const test::BoxCase bc = test::random_box_case(rng, 1 + trial % 4, 6);
    const vps::Box &global = bc.global, &s = bc.src, &t = bc.dst, &q = bc.q;
    if (q.empty()) continue;
    const auto src = filled(s, global, elem, pad);
    std::vector<std::byte> dst(pad + static_cast<std::size_t>(t.numel()) * elem, std::byte{0xEE});
    const StridedRuns r = strided_runs(q, s, t, elem);
    const auto sa = reinterpret_cast<std::uintptr_t>(src.data() + pad);
    const auto da = reinterpret_cast<std::uintptr_t>(dst.data() + pad);
    const int unit = copy_unit_bytes(r, sa, da);
    ASSERT_EQ(r.run_bytes % unit, 0);
    ASSERT_EQ((sa + static_cast<std::uint64_t>(r.src_base)) % unit, 0u);
    const std::int64_t units = r.rows * r.run_bytes / unit;
    for (std::int64_t u = 0; u < units; ++u) {  // what each kernel thread does for its unit
      std::int64_t so = 0, dof = 0;
      unit_offsets(r, u, unit, so, dof);
      std::memcpy(dst.data() + pad + dof, src.data() + pad + so, static_cast<std::size_t>(unit));
    }
    expect_copied(dst, pad, t, q, global, elem, "unit map");
    // The host path (copy_box through MemoryOps::copy_strided) gives the same bytes.
    std::vector<std::byte> host(dst.size(), std::byte{0xEE});
    copy_box(q, src.data() + pad, s, host.data() + pad, t, elem);
    ASSERT_EQ(host, dst) << q.str();
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST(BoxIndex, UnitIsTheWidestCommonPowerOfTwo) {
  const vps::Box g = test::box({0, 0}, {8, 64});
  const StridedRuns whole_rows = strided_runs(test::box({2, 0}, {5, 64}), g, g, 4);
  EXPECT_EQ(whole_rows.rows, 1);  // full trailing dim folds into one run
  EXPECT_EQ(copy_unit_bytes(whole_rows, 0, 0), 16);
  const StridedRuns cols = strided_runs(test::box({0, 3}, {8, 4}), g, g, 4);  // one column
  EXPECT_EQ(cols.rows, 8);
  EXPECT_EQ(cols.run_bytes, 4);
  EXPECT_EQ(copy_unit_bytes(cols, 0, 0), 4);
  EXPECT_EQ(copy_unit_bytes(cols, 2, 0), 2);
  EXPECT_EQ(copy_unit_bytes(cols, 0, 1), 1);
  EXPECT_THROW(strided_runs(test::box({0, 0}, {9, 1}), g, g, 4), InvariantError);
}

}  // namespace
}  // namespace dynatrain::exec
