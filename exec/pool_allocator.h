// PoolAllocator: a StateAllocator that recycles released memory, so destination state is built
// in the memory the source state gave back (first touch of fresh memory is 0.25-2 GB/s on the
// target machines, 5-50x slower than writing warm memory).
//
// Two kinds of blocks:
//   small  (< kMappedBytes)  best-fit split/merge over chunks from the heap, 64-byte rounding.
//   mapped (>= kMappedBytes, and everything reserve() hands out)  a page-aligned address range
//          of its own whose pages are individually live or not (page-wise memory, engine.h):
//          commit() makes pages live, decommit() gives them back while the rest stays valid.
//          Warm pages given back (decommit, release) become "spare pages"; a later commit takes
//          spare pages first and moves them into place with mremap (page tables move, no bytes
//          are copied and no page is touched for the first time); only when no spare page is
//          left does it use fresh pages, which the first write faults in.
//   prefault(n)  makes sure at least n bytes of spare pages exist, making fresh ones resident if
//                needed: in huge pages with the policy on (below), else by the faster of
//                MADV_POPULATE_WRITE and a write a page measured here (exec/machine_rates.h).
//   move_pages   moves live pages of one mapped block into not-live pages of another (mremap):
//                the engine's remapped keeps; live bytes do not change.
//
// Huge pages (HugePages, exec/huge_pages.h; kAuto, the default, is on where the kernel's
// transparent huge pages are in `madvise` or `always` mode): mapped blocks of at least
// kHugeMinBytes start on 2 MiB and span whole 2 MiB pages (the bytes asked for rounded up: at
// most half as much again, far less for the large buckets state lives in), advised
// MADV_HUGEPAGE; every fresh
// page the pool hands out is made resident at once by MADV_POPULATE_WRITE (2 MiB pages, about
// 13x a first write a page on the target machines) where the pool grows -- allocate() of the
// state before training, prefault() behind it, and only what a switch's commit cannot fill
// from spare pages inside the pause; a commit takes spare runs congruent with its target
// modulo 2 MiB first, so mremap moves whole 2 MiB page-table entries and freed blocks stay in
// huge pages for later switches. Accounting stays per 4 KiB page (live counts what was asked
// for, not the rounding).
//
// Accounting (what tests and the CLI report):
//   live      bytes handed out and live: small blocks (rounded) + live pages   -> peak_live()
//   reserved  small chunks + live pages + spare pages (what the process holds) -> peak_reserved()
//   fresh     bytes ever obtained from the system (first-touch cost)           -> fresh_bytes()
// Thread-safe (one mutex); the engine calls it from one thread per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "exec/engine.h"
#include "exec/huge_pages.h"

namespace dynatrain::exec {

// kAuto: huge pages where thp_mode() is madvise or always; kOff: 4 KiB pages only.
enum class HugePages : std::uint8_t { kAuto, kOff };
// "auto", "off"; InputError naming the valid values otherwise.
HugePages parse_huge_pages(const std::string& text);

class PoolAllocator final : public StateAllocator {
 public:
  static constexpr std::size_t kAlign = 64;
  static constexpr std::size_t kMappedBytes = 64 << 10;  // blocks this large are page-mapped
  static constexpr std::size_t kHugeMinBytes = 4 << 20;  // ... and with huge pages, in 2 MiB pages

  explicit PoolAllocator(HugePages policy = HugePages::kAuto);
  // As above with the mode given (tests: kNever turns huge pages off under kAuto).
  PoolAllocator(HugePages policy, ThpMode mode);
  ~PoolAllocator() override;
  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;

  // Throws InvariantError for bytes == 0 and std::bad_alloc when the system has no memory.
  std::byte* allocate(std::size_t bytes) override;
  // `bytes` must be the size passed to allocate / reserve (InvariantError otherwise, or for a
  // pointer that this pool did not hand out). Live pages of a mapped block become spare pages.
  void release(std::byte* data, std::size_t bytes) override;

  // Page-wise memory (engine.h): every block of at least kMappedBytes supports it.
  std::size_t pagewise_min_bytes() const override { return kMappedBytes; }
  bool can_adopt() const override { return true; }
  bool can_move_pages() const override { return true; }
  bool huge_pages() const override { return huge_; }
  void move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                  std::size_t bytes) override;
  std::byte* reserve(std::size_t bytes) override;
  void commit(std::byte* base, std::size_t offset, std::size_t bytes) override;
  void decommit(std::byte* base, std::size_t offset, std::size_t bytes) override;

  // Makes sure the pool holds at least `bytes` of spare pages that are already touched
  // (allocating and touching fresh ones if needed; never counted as live). Returns the bytes
  // newly touched. The elastic device manager calls it while training still runs, so that the
  // switch itself builds destination state in warm memory.
  std::size_t prefault(std::size_t bytes);

  // Frees small chunks that hold no live block and unmaps all spare pages. Returns the bytes
  // given back.
  std::size_t trim();
  // Restarts peak_live/peak_reserved at the current values.
  void reset_peaks();

  std::size_t live_bytes() const;
  std::size_t peak_live() const;
  std::size_t reserved_bytes() const;
  std::size_t peak_reserved() const;
  std::size_t fresh_bytes() const;
  std::size_t spare_bytes() const;
  // Bytes of the mapped blocks' address space (live, spare in place or empty) and, of those,
  // what /proc/self/smaps shows in huge pages now (reads smaps: for reports, not hot paths).
  std::size_t mapped_block_bytes() const;
  std::size_t huge_page_bytes() const;
  // Fresh bytes made resident with huge pages where the pool grew (commit, allocate, prefault).
  std::size_t populated_bytes() const;
  // The size a mapped block of `bytes` spans: whole pages, whole 2 MiB pages with huge pages
  // from kHugeMinBytes on.
  std::size_t block_bytes(std::size_t bytes) const;

 private:
  struct Range {
    std::size_t size = 0;
    std::uint32_t chunk = 0;
  };
  struct Chunk {
    std::byte* base = nullptr;
    std::size_t size = 0;
    std::size_t live = 0;
  };
  // A mapped block: its pages are kUntouched (never committed: empty address space), kLive,
  // kSpare (decommitted: a spare page in place) or kMoved (its spare page was moved away by
  // mremap; empty address space again). A block's addresses stay mapped until its release.
  enum PageState : std::uint8_t { kUntouched, kLive, kSpare, kMoved };
  struct Mapped {
    std::size_t bytes = 0;  // block_bytes() of the size asked for
    std::size_t asked = 0;  // the size asked for, rounded to pages
    bool huge = false;      // in 2 MiB pages (advised; fresh pages populated at commit)
    std::vector<PageState> pages;
  };
  void insert_free(std::byte* p, Range r);
  void erase_free(std::map<std::byte*, Range>::iterator it);
  std::byte* allocate_small(std::size_t bytes);
  void release_small(std::byte* data, std::size_t bytes);
  std::byte* reserve_locked(std::size_t bytes);
  Mapped& mapped_block(std::byte* base, std::size_t offset, std::size_t bytes);
  void commit_locked(std::byte* base, std::size_t offset, std::size_t bytes);
  // Fills [to, to + bytes) with spare pages (mremap); returns the bytes filled (less when the
  // spare pages run out).
  std::size_t take_spares(std::byte* to, std::size_t bytes, bool congruent);
  // The spare run to move to `to`: with `congruent` the first one congruent with it modulo
  // 2 MiB (so mremap moves whole 2 MiB page-table entries), else (or when none is) the lowest.
  std::map<std::byte*, std::size_t>::iterator pick_spare(const std::byte* to, bool congruent);
  void add_spare(std::byte* p, std::size_t bytes);
  // Moves [from, from + n), out of spares_ already, to `to`; marks or unmaps what it leaves.
  void move_spare(std::byte* from, std::byte* to, std::size_t n);
  // A huge block's pages: every whole 2 MiB page of [to, to + bytes) from a spare run that holds
  // a whole 2 MiB-aligned page (moved as one page-table entry: it stays a huge page), the parts
  // of one at the ends from congruent spare pages, the rest fresh and made resident in huge
  // pages. Spare runs taken in pieces at other offsets would have each of their huge pages split
  // into 4 KiB pages for good (measured: bench/results/huge-page-decay.md).
  void commit_huge(std::byte* to, std::size_t bytes);
  bool take_huge_unit(std::byte* to);
  const Mapped* owner_of(const std::byte* p) const;  // the mapped block holding p, if any
  void note_reserved();

  const bool huge_;
  mutable std::mutex mu_;
  std::map<std::uint32_t, Chunk> chunks_;
  std::uint32_t next_chunk_ = 0;
  std::map<std::byte*, Range> free_;                // by address (for merging)
  std::multimap<std::size_t, std::byte*> by_size_;  // by size (for best fit)
  std::map<std::byte*, Range> used_;
  std::map<std::byte*, Mapped> mapped_;       // by base address
  std::map<std::byte*, std::size_t> spares_;  // spare page runs: address -> bytes
  std::size_t small_reserved_ = 0, mapped_live_ = 0, spare_ = 0;
  std::size_t live_ = 0, peak_live_ = 0, peak_reserved_ = 0, fresh_ = 0, populated_ = 0;
};

}  // namespace dynatrain::exec
