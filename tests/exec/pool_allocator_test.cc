// The engine's pool allocator (exec/pool_allocator.h): best-fit reuse and merging of released
// ranges, page-wise blocks whose spare pages are recycled with their live pages' contents kept,
// page moves without a copy, and prefaulted pages; the accounting checked at every step.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "exec/pool_allocator.h"

namespace dynatrain::exec {
namespace {

TEST(PoolAllocator, ReusesReleasedMemoryBestFitAndMerges) {
  PoolAllocator pool;
  std::byte* a = pool.allocate(1000);
  std::byte* b = pool.allocate(3000);
  std::byte* c = pool.allocate(1000);
  EXPECT_EQ(pool.fresh_bytes(), 1024u + 3008u + 1024u);
  pool.release(b, 3000);
  // Best fit: a 1000-byte request takes part of b's range, no fresh memory.
  std::byte* d = pool.allocate(1000);
  EXPECT_EQ(d, b);
  EXPECT_EQ(pool.fresh_bytes(), 5056u);
  std::byte* e = pool.allocate(1900);  // the rest of b's range (1984 bytes) fits
  EXPECT_EQ(e, b + 1024);
  pool.release(d, 1000);
  pool.release(e, 1900);
  // Merged again: 3000 fits without new memory.
  EXPECT_EQ(pool.allocate(3000), b);
  EXPECT_EQ(pool.fresh_bytes(), 5056u);
  EXPECT_EQ(pool.live_bytes(), 1024u + 3008u + 1024u);
  EXPECT_EQ(pool.peak_live(), 5056u);
  pool.release(a, 1000);
  pool.release(c, 1000);
  EXPECT_EQ(pool.trim(), 2048u);
  EXPECT_EQ(pool.reserved_bytes(), 3008u);
  EXPECT_THROW(pool.release(a, 1000), InvariantError);
  EXPECT_THROW(pool.release(b, 17), InvariantError);
}

// Page-wise blocks: decommitted pages become spare pages, a later commit moves them into
// place (no fresh memory), the live pages of a block keep their contents throughout, and the
// accounting follows every step. Random commit / decommit / release against a model.
TEST(PoolAllocator, PageWiseBlocksRecycleSparePagesAndKeepContents) {
  PoolAllocator pool(HugePages::kOff);  // 4 KiB pages: blocks from 64 KiB on are page-wise
  std::mt19937 rng(7);
  struct Block {
    std::byte* p;
    std::size_t n;
    std::vector<int> state;  // 0 untouched, 1 live, 2 given back
  };
  std::vector<Block> blocks;
  auto stamp = [](const Block& b, std::size_t i) {
    return static_cast<std::byte>((reinterpret_cast<std::uintptr_t>(b.p) / kPageBytes + i) & 0xff);
  };
  auto live_model = [&] {
    std::size_t live = 0;
    for (const auto& b : blocks)
      for (int st : b.state) live += st == 1 ? kPageBytes : 0;
    return live;
  };
  for (int it = 0; it < 600; ++it) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 || blocks.size() < 2) {
      const std::size_t n = (rng() % 48 + 16) * kPageBytes;
      const bool lazy = rng() % 2 == 0;
      Block b{lazy ? pool.reserve(n) : pool.allocate(n), n, std::vector<int>(n / kPageBytes, lazy ? 0 : 1)};
      for (std::size_t i = 0; i < b.state.size(); ++i)
        if (b.state[i] == 1) std::memset(b.p + i * kPageBytes, static_cast<int>(stamp(b, i)), kPageBytes);
      blocks.push_back(b);
      continue;
    }
    Block& b = blocks[rng() % blocks.size()];
    const std::size_t a = rng() % b.state.size(), z = std::min(b.state.size(), a + 1 + rng() % 8);
    if (op == 1) {
      pool.decommit(b.p, a * kPageBytes, (z - a) * kPageBytes);
      for (std::size_t i = a; i < z; ++i) b.state[i] = b.state[i] == 1 ? 2 : b.state[i] == 0 ? 0 : 2;
    } else if (op == 2) {
      if (std::any_of(b.state.begin() + a, b.state.begin() + z, [](int st) { return st == 2; })) continue;
      const std::size_t fresh = pool.fresh_bytes(), spare = pool.spare_bytes();
      pool.commit(b.p, a * kPageBytes, (z - a) * kPageBytes);
      std::size_t added = 0;
      for (std::size_t i = a; i < z; ++i)
        if (b.state[i] == 0) {
          b.state[i] = 1;
          added += kPageBytes;
          std::memset(b.p + i * kPageBytes, static_cast<int>(stamp(b, i)), kPageBytes);
        }
      // Spare pages first: fresh memory only for what the spares could not cover.
      EXPECT_EQ(pool.fresh_bytes() - fresh, added - std::min(added, spare));
    } else {
      for (std::size_t i = 0; i < b.state.size(); ++i) {
        if (b.state[i] == 1) {
          ASSERT_EQ(b.p[i * kPageBytes + 17], stamp(b, i)) << "page " << i;
        }
      }
      pool.release(b.p, b.n);
      b = blocks.back();
      blocks.pop_back();
    }
    ASSERT_EQ(pool.live_bytes(), live_model());
  }
  for (auto& b : blocks) pool.release(b.p, b.n);
  EXPECT_EQ(pool.live_bytes(), 0u);
  EXPECT_EQ(pool.reserved_bytes(), pool.spare_bytes());
}

// move_pages: live pages of one block become the pages of another (no copy, no fresh memory),
// the source pages are gone as after decommit, and every misuse is refused.
TEST(PoolAllocator, MovePagesMovesLivePagesWithoutCopy) {
  PoolAllocator pool(HugePages::kOff);  // 4 KiB pages: blocks from 64 KiB on are page-wise
  const std::size_t n = 16 * kPageBytes;
  std::byte* a = pool.allocate(n);
  for (std::size_t i = 0; i < 16; ++i) std::memset(a + i * kPageBytes, static_cast<int>(i + 1), kPageBytes);
  std::byte* b = pool.reserve(n);
  pool.commit(b, 0, 4 * kPageBytes);
  const std::size_t fresh = pool.fresh_bytes(), live = pool.live_bytes();
  pool.move_pages(a, 4 * kPageBytes, b, 8 * kPageBytes, 4 * kPageBytes);
  EXPECT_EQ(pool.live_bytes(), live);
  EXPECT_EQ(pool.fresh_bytes(), fresh);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b[(8 + i) * kPageBytes], static_cast<std::byte>(5 + i));
    EXPECT_EQ(b[(8 + i) * kPageBytes + kPageBytes - 1], static_cast<std::byte>(5 + i));
  }
  EXPECT_EQ(a[3 * kPageBytes], std::byte{4});  // neighbours stay
  EXPECT_EQ(a[8 * kPageBytes], std::byte{9});
  EXPECT_THROW(pool.move_pages(a, 0, b, 0, kPageBytes), InvariantError);                             // onto a live page
  EXPECT_THROW(pool.move_pages(a, 4 * kPageBytes, b, 12 * kPageBytes, kPageBytes), InvariantError);  // moved away
  EXPECT_THROW(pool.move_pages(a, 0, b, 12 * kPageBytes, 100), InvariantError);                      // not whole pages
  EXPECT_THROW(pool.move_pages(a, 0, a, kPageBytes, 2 * kPageBytes), InvariantError);                // overlapping
  pool.decommit(a, 4 * kPageBytes, 4 * kPageBytes);  // already gone: nothing changes
  EXPECT_EQ(pool.live_bytes(), live);
  pool.commit(a, 4 * kPageBytes, 4 * kPageBytes);  // the holes can be made live again
  std::memset(a + 4 * kPageBytes, 0x55, 4 * kPageBytes);
  EXPECT_EQ(pool.live_bytes(), live + 4 * kPageBytes);
  pool.release(a, n);
  pool.release(b, n);
  EXPECT_EQ(pool.live_bytes(), 0u);
}

TEST(PoolAllocator, PrefaultTouchesSparePagesThatLaterAllocationsUse) {
  PoolAllocator pool(HugePages::kOff);  // 4 KiB pages: prefault rounds to them
  EXPECT_EQ(pool.prefault(1 << 20), std::size_t{1} << 20);
  EXPECT_EQ(pool.prefault(1 << 20), 0u);  // already there
  EXPECT_EQ(pool.live_bytes(), 0u);       // never counted as live
  const std::size_t fresh = pool.fresh_bytes();
  std::byte* p = pool.allocate(768 << 10);
  EXPECT_EQ(pool.fresh_bytes(), fresh);  // built from the prefaulted pages
  EXPECT_EQ(pool.spare_bytes(), std::size_t{256} << 10);
  std::memset(p, 1, 768 << 10);
  pool.release(p, 768 << 10);
  EXPECT_EQ(pool.spare_bytes(), std::size_t{1} << 20);
  EXPECT_EQ(pool.trim(), std::size_t{1} << 20);
  EXPECT_EQ(pool.reserved_bytes(), 0u);
}

}  // namespace
}  // namespace dynatrain::exec
