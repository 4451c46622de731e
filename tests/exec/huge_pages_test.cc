// Transparent huge pages for state memory (exec/huge_pages.h) and the pool's HugePages policy
// (exec/pool_allocator.h): the mode parser, 2 MiB alignment and rounding, the populate fallback,
// spare pages taken congruent modulo 2 MiB, and the same bytes moved with and without huge pages
// (every byte checked, warm reuse of freed blocks).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "exec/huge_pages.h"
#include "exec/pool_allocator.h"

namespace dynatrain::exec {
namespace {

bool aligned_huge(const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes == 0; }

TEST(HugePages, ParsesTheKernelsModeAndAbsentFileIsNever) {
  EXPECT_EQ(parse_thp_mode("always [madvise] never"), ThpMode::kMadvise);
  EXPECT_EQ(parse_thp_mode("[always] madvise never\n"), ThpMode::kAlways);
  EXPECT_EQ(parse_thp_mode("always madvise [never]"), ThpMode::kNever);
  EXPECT_THROW(parse_thp_mode("always madvise never"), InputError);
  EXPECT_THROW(parse_thp_mode("[sometimes]"), InputError);
  EXPECT_STREQ(thp_mode_name(ThpMode::kMadvise), "madvise");
  EXPECT_EQ(read_thp_mode("/nonexistent/transparent_hugepage/enabled"), ThpMode::kNever);
  const std::string path = testing::TempDir() + "thp_enabled";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("[always] madvise never\n", f);
  std::fclose(f);
  EXPECT_EQ(read_thp_mode(path), ThpMode::kAlways);
  std::remove(path.c_str());
  EXPECT_EQ(thp_mode(), read_thp_mode("/sys/kernel/mm/transparent_hugepage/enabled"));
  EXPECT_EQ(parse_huge_pages("auto"), HugePages::kAuto);
  EXPECT_EQ(parse_huge_pages("off"), HugePages::kOff);
  EXPECT_THROW(parse_huge_pages("on"), InputError);
}

TEST(HugePages, BlocksAre2MiBAlignedAndRoundedOnlyWithThePolicyOn) {
  EXPECT_EQ(round_up_huge(1), kHugePageBytes);
  EXPECT_EQ(round_up_huge(kHugePageBytes), kHugePageBytes);
  EXPECT_EQ(round_up_huge(kHugePageBytes + 1), 2 * kHugePageBytes);
  PoolAllocator on(HugePages::kAuto, ThpMode::kMadvise), never(HugePages::kAuto, ThpMode::kNever);
  PoolAllocator off(HugePages::kOff);
  EXPECT_TRUE(on.huge_pages());
  EXPECT_FALSE(never.huge_pages());
  EXPECT_FALSE(off.huge_pages());
  const std::size_t big = PoolAllocator::kHugeMinBytes + 5000;
  EXPECT_EQ(on.block_bytes(big), round_up_huge(big));
  EXPECT_EQ(on.block_bytes(100 << 10), std::size_t{100} << 10);  // reserve() below 4 MiB: 4 KiB pages
  EXPECT_EQ(never.block_bytes(big), (big + kPageBytes - 1) / kPageBytes * kPageBytes);
  std::byte* p = on.allocate(big);
  std::byte* q = on.reserve(big);
  EXPECT_TRUE(aligned_huge(p) && aligned_huge(q));
  EXPECT_EQ(on.mapped_block_bytes(), 2 * round_up_huge(big));
  EXPECT_EQ(on.live_bytes(), (big + kPageBytes - 1) / kPageBytes * kPageBytes);  // accounted as asked
  // Whole 2 MiB pages made resident at allocation; the pages past the size asked are idle:
  // held (reserved), not live.
  EXPECT_EQ(on.populated_bytes(), round_up_huge(big));
  EXPECT_EQ(on.reserved_bytes(), round_up_huge(big));
  std::memset(p, 7, big);
  on.commit(q, 0, big);  // up to the asked size's last page; a partial last page may be given back
  EXPECT_EQ(on.reserved_bytes(), 2 * round_up_huge(big));
  on.decommit(q, 0, kHugePageBytes + kPageBytes);  // a 2 MiB page still partly live stays whole
  EXPECT_EQ(on.spare_bytes(), kHugePageBytes);
  EXPECT_EQ(on.live_bytes(), 2 * ((big + kPageBytes - 1) / kPageBytes * kPageBytes) - kHugePageBytes - kPageBytes);
  on.decommit(q, kHugePageBytes, big - kHugePageBytes);
  EXPECT_EQ(on.spare_bytes(), round_up_huge(big)) << "given back as whole 2 MiB pages";
  EXPECT_THROW(on.release(p, kHugePageBytes), InvariantError);  // not the size asked for
  on.release(p, big);
  on.release(q, big);
  EXPECT_EQ(on.live_bytes(), 0u);
}

TEST(HugePages, PopulatesOrFallsBackToATouchAPageAndCounts) {
  const std::size_t n = 2 * kHugePageBytes;
  void* raw = ::mmap(nullptr, n + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  auto* p = reinterpret_cast<std::byte*>(round_up_huge(reinterpret_cast<std::uintptr_t>(raw)));
  const HugePageCounters c0 = huge_page_counters();
  EXPECT_EQ(make_resident_huge(p, n, /*force_touch=*/true), PopulateWay::kTouch);
  const HugePageCounters c1 = huge_page_counters();
  EXPECT_EQ(c1.calls - c0.calls, 1u);
  EXPECT_EQ(c1.touched_bytes - c0.touched_bytes, n);
  EXPECT_EQ(c1.populated_bytes, c0.populated_bytes);
  const PopulateWay way = make_resident_huge(p, n);  // MADV_POPULATE_WRITE where the kernel has it
  const HugePageCounters c2 = huge_page_counters();
  EXPECT_EQ(c2.bytes - c1.bytes, n);
  EXPECT_EQ(
      way == PopulateWay::kPopulate ? c2.populated_bytes - c1.populated_bytes : c2.touched_bytes - c1.touched_bytes, n);
  for (std::size_t at = 0; at < n; at += kPageBytes) ASSERT_EQ(p[at], std::byte{0}) << at;  // resident, zero
  EXPECT_THROW(make_resident_huge(p + 1, kPageBytes), InvariantError);
  ::munmap(raw, n + kHugePageBytes);
}

// A commit into a huge-page block takes the spare run congruent with it modulo 2 MiB, whatever
// the spares' order by address; without huge pages, the lowest. Spare pages carry the bytes they
// held when given back (mremap moves them), which tells which run was taken.
TEST(HugePages, CommitTakesSparePagesCongruentModulo2MiB) {
  for (const HugePages policy : {HugePages::kAuto, HugePages::kOff}) {
    PoolAllocator pool(policy, ThpMode::kMadvise);
    const std::size_t n = PoolAllocator::kHugeMinBytes;
    std::byte* a = pool.allocate(n);  // 2 MiB-aligned in both policies (every mapping is)
    std::byte* b = pool.allocate(n);
    std::memset(a, 0xa, n);
    std::memset(b, 0xb, n);
    // The lower block gives back a run 4 KiB past a 2 MiB boundary (taken first by address),
    // the higher one a run on a boundary (the congruent one).
    std::byte* lo = std::min(a, b);
    std::byte* hi = std::max(a, b);
    pool.decommit(lo, kPageBytes, 16 * kPageBytes);
    pool.decommit(hi, kHugePageBytes, kHugePageBytes);
    std::byte* d = pool.reserve(n);
    pool.commit(d, 0, 16 * kPageBytes);
    const std::byte want = policy == HugePages::kAuto ? hi[0] : lo[0];
    EXPECT_EQ(d[0], want) << "policy " << static_cast<int>(policy);
    EXPECT_EQ(d[16 * kPageBytes - 1], want);
    pool.release(a, n);
    pool.release(b, n);
    pool.release(d, n);
  }
}

// One "switch" of a state of several blocks into blocks of other sizes, built granule by granule
// from the source's drained pages, then back (warm); every byte a function of its global index.
// Both policies move the same bytes; the warm round takes no fresh memory in either.
std::size_t switch_and_back(PoolAllocator& pool) {
  const std::vector<std::size_t> from = {12 << 20, 9 << 20, 20 << 20}, to = {16 << 20, 25 << 20};
  auto value = [](std::size_t i) { return static_cast<std::byte>((i * 2654435761u) >> 13); };
  auto fill = [&](const std::vector<std::size_t>& sizes) {
    std::vector<std::byte*> bs;
    std::size_t g = 0;
    for (std::size_t n : sizes) {
      bs.push_back(pool.allocate(n));
      for (std::size_t i = 0; i < n; ++i) bs.back()[i] = value(g + i);
      g += n;
    }
    return bs;
  };
  auto move = [&](std::vector<std::byte*> src, const std::vector<std::size_t>& ss, const std::vector<std::size_t>& ds) {
    std::vector<std::byte*> dst;
    for (std::size_t n : ds) dst.push_back(pool.reserve(n));
    std::size_t si = 0, so = 0, drained = 0;  // the source position of the next byte; given back below
    for (std::size_t k = 0; k < ds.size(); ++k)
      for (std::size_t at = 0; at < ds[k]; at += kHugePageBytes) {
        const std::size_t g = std::min(kHugePageBytes, ds[k] - at);
        pool.commit(dst[k], at, g);
        for (std::size_t i = 0; i < g;) {
          const std::size_t run = std::min(g - i, ss[si] - so);
          std::memcpy(dst[k] + at + i, src[si] + so, run);
          i += run, so += run;
          const std::size_t upto = so == ss[si] ? so : so / kHugePageBytes * kHugePageBytes;  // read wholly
          if (upto > drained) pool.decommit(src[si], drained, upto - drained), drained = upto;
          if (so == ss[si]) pool.release(src[si], ss[si]), ++si, so = 0, drained = 0;
        }
      }
    return dst;
  };
  std::vector<std::byte*> state = fill(from);
  pool.prefault(8 << 20);  // headroom: the switches then find every page they build in spares
  state = move(state, from, to);
  const std::size_t fresh = pool.fresh_bytes();
  state = move(state, to, from);
  state = move(state, from, to);
  EXPECT_EQ(pool.fresh_bytes(), fresh) << "warm switches took fresh memory";
  std::size_t g = 0, bad = 0;
  for (std::size_t k = 0; k < to.size(); ++k) {
    for (std::size_t i = 0; i < to[k]; ++i) bad += state[k][i] != value(g + i);
    g += to[k];
  }
  const std::size_t huge = pool.huge_page_bytes();
  for (std::size_t k = 0; k < to.size(); ++k) pool.release(state[k], to[k]);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(pool.live_bytes(), 0u);
  return huge;
}

TEST(HugePages, PoolMovesTheSameBytesWithAndWithoutHugePages) {
  PoolAllocator off(HugePages::kOff), on(HugePages::kAuto, ThpMode::kMadvise);
  EXPECT_EQ(switch_and_back(off), 0u);  // 4 KiB pages: nothing in huge pages
  const std::size_t huge = switch_and_back(on);
  EXPECT_GT(on.populated_bytes(), 0u);
  EXPECT_EQ(off.populated_bytes(), 0u);
  // The same memory but for rounding: a huge block holds whole 2 MiB pages.
  EXPECT_GE(on.fresh_bytes(), off.fresh_bytes());
  EXPECT_LE(on.fresh_bytes(), off.fresh_bytes() + 5 * kHugePageBytes);
  // Where the kernel grants 2 MiB pages (THP madvise or always), the state lies in them, still
  // after three switches: each whole 2 MiB page of the 16 + 25 MiB is moved whole, none split.
  if (thp_mode() != ThpMode::kNever) {
    EXPECT_GE(huge, std::size_t{36} << 20) << "the state's huge pages were split by the switches";
  }
}

// Blocks of 64 KiB - 4 MiB (small ZeRO buckets) with huge pages: carved out of a few slabs of
// 2 MiB pages (not page-wise), rounded to 64 bytes; an emptied slab's pages serve the next
// "switch" warm; every byte a function of its global index.
TEST(HugePages, SmallBlocksAreCarvedOutOfSlabsThatRecycleWarm) {
  PoolAllocator on(HugePages::kAuto, ThpMode::kMadvise);
  EXPECT_EQ(on.pagewise_min_bytes(), PoolAllocator::kHugeMinBytes);
  EXPECT_EQ(PoolAllocator(HugePages::kOff).pagewise_min_bytes(), PoolAllocator::kMappedBytes);
  // Only what the engine handles whole anyway is carved: below budget / 16 for a small budget,
  // nothing where keeps are to be remapped.
  TransitionOptions small_budget, remap;
  small_budget.mem_budget = 4 << 20;
  remap.keep_path = KeepPath::kRemap;
  EXPECT_EQ(PoolAllocator(HugePages::kAuto, ThpMode::kMadvise, small_budget).carve_below(),
            pagewise_threshold(4 << 20));
  EXPECT_EQ(PoolAllocator(HugePages::kAuto, ThpMode::kMadvise, remap).pagewise_min_bytes(),
            PoolAllocator::kMappedBytes);
  auto value = [](std::size_t i) { return static_cast<std::byte>((i * 2654435761u) >> 11); };
  auto build = [&](std::size_t count, std::size_t bytes) {
    std::vector<std::byte*> bs;
    for (std::size_t k = 0; k < count; ++k) {
      bs.push_back(on.allocate(bytes));
      for (std::size_t i = 0; i < bytes; ++i) bs.back()[i] = value(k * bytes + i);
    }
    return bs;
  };
  auto check_and_release = [&](const std::vector<std::byte*>& bs, std::size_t bytes, std::size_t first = 0) {
    std::size_t bad = 0;
    for (std::size_t k = 0; k < bs.size(); ++k) {
      for (std::size_t i = 0; i < bytes; ++i) bad += bs[k][i] != value((first + k) * bytes + i);
      on.release(bs[k], bytes);
    }
    return bad;
  };
  const std::size_t a = 128 << 10, b = (96 << 10) + 200;  // 160 x 128 KiB = 20 MiB; 213 x ~96 KiB
  std::vector<std::byte*> state = build(160, a);
  EXPECT_EQ(on.live_bytes(), 160 * a);
  EXPECT_EQ(on.fresh_bytes() % kHugePageBytes, 0u) << "slabs are whole 2 MiB pages";
  // Resident only where blocks lie: whole 2 MiB pages, at most one beyond what is asked.
  EXPECT_LE(on.mapped_block_bytes(), 160 * a + kHugePageBytes);
  if (thp_mode() != ThpMode::kNever) {
    EXPECT_GE(on.huge_page_bytes(), 160 * a * 3 / 4) << "small blocks not in 2 MiB pages";
  }
  EXPECT_THROW(on.decommit(state[0], 0, kPageBytes), InvariantError) << "a carved block is not page-wise";
  on.prefault(on.mapped_block_bytes() + kHugePageBytes);  // headroom for the larger state, as before a switch
  const std::size_t fresh = on.fresh_bytes();
  for (int round = 0; round < 3; ++round) {  // build the new state, then give the old one back
    const bool to_b = round % 2 == 0;
    std::vector<std::byte*> next = build(to_b ? 213 : 160, to_b ? b : a);
    EXPECT_EQ(check_and_release(state, to_b ? a : b), 0u) << "round " << round;
    state = std::move(next);
  }
  EXPECT_EQ(on.fresh_bytes(), fresh) << "switches between warm slabs took fresh memory";
  // Idle 2 MiB pages of a slab serve a page-wise block: the first half of the blocks given back
  // (about 10 MiB, whole 2 MiB pages among them), an 8 MiB block takes no fresh memory.
  const std::size_t half = state.size() / 2;
  EXPECT_EQ(check_and_release({state.begin(), state.begin() + half}, b), 0u);
  state.erase(state.begin(), state.begin() + half);
  const std::size_t before = on.fresh_bytes(), big = 8 << 20;
  std::byte* block = on.allocate(big);
  std::memset(block, 7, big);
  EXPECT_EQ(on.fresh_bytes(), before) << "an idle slab page was not taken";
  on.release(block, big);
  EXPECT_EQ(check_and_release(state, b, half), 0u);
  EXPECT_EQ(on.live_bytes(), 0u);
  EXPECT_EQ(on.mapped_block_bytes(), 0u) << "an empty slab gives its pages back";
  const std::size_t spare = on.spare_bytes();
  EXPECT_EQ(on.reserved_bytes(), spare);
  EXPECT_EQ(on.trim(), spare);
  EXPECT_EQ(on.reserved_bytes(), 0u);
}

}  // namespace
}  // namespace dynatrain::exec
