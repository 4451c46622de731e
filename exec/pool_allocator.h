// PoolAllocator: a StateAllocator that recycles released memory, so destination state is built
// in the memory the source state gave back (first touch of fresh memory is 0.25-2 GB/s on the
// target machines, 5-50x slower than writing warm memory).
//
// Two kinds of blocks:
//   small  (< kMappedBytes; with huge pages, below carve_below(): kHugeMinBytes, or less for an
//          engine budget under 64 MiB, below)  best-fit split/merge over chunks, 64-byte
//          rounding. Chunks come from the heap, except that with huge pages a block of at least
//          kMappedBytes that finds no free range opens a slab: kSlabBytes of address
//          space (2 MiB-aligned, advised MADV_HUGEPAGE) whose 2 MiB pages are resident only where
//          a block lies (made so like a commit: a whole spare 2 MiB page moved in, else fresh and
//          resident at once). A whole 2 MiB page of a slab that holds no block is taken by any
//          commit that finds no spare 2 MiB page, and a slab whose last block goes gives its
//          pages back as spare pages. So state in thousands of buffers of 64 KiB - 4 MiB (small
//          ZeRO buckets) sits in 2 MiB pages, in a few mappings, and its memory serves any later
//          block; those blocks are not page-wise. The engine handles blocks whole below
//          pagewise_threshold(budget) anyway (exec/engine.h); a pool built for a smaller budget
//          carves only below that threshold, so the engine's peak bound holds for any budget.
//   mapped (>= kMappedBytes, with huge pages >= carve_below(), and everything reserve() hands
//          out)  a page-aligned address range of its own whose pages are individually live or
//          not (page-wise memory, engine.h):
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
// MADV_HUGEPAGE, and commit and give back whole 2 MiB pages (pages of a resident 2 MiB page
// that are not live are idle: reserved, not live); every fresh page the pool hands out is made
// resident at once by MADV_POPULATE_WRITE (2 MiB pages, about 13x a first write a page on the
// target machines) where the pool grows -- allocate() of the state before training, prefault()
// behind it, and only what a switch's commit cannot fill from spare or idle slab 2 MiB pages
// inside the pause; mremap moves whole 2 MiB page-table entries, so freed blocks stay in huge
// pages for later switches. Live counts what was asked for, not the rounding.
//
// Accounting (what tests and the CLI report):
//   live      bytes handed out and live: small blocks (rounded) + live pages   -> peak_live()
//   reserved  small chunks, resident slab pages, live, idle and spare pages
//             (what the process holds)                                     -> peak_reserved()
//   fresh     bytes ever obtained from the system (first-touch cost)           -> fresh_bytes()
// Thread-safe (one mutex); the engine calls it from one thread per rank.
#pragma once

#include <algorithm>
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
  static constexpr std::size_t kSlabBytes = 64 << 20;    // a slab's address space (pages resident on use)

  // `engine`: the options of the engine switches that use this pool. Their budget and keep path
  // set carve_below(): only blocks the engine handles whole anyway (below
  // pagewise_threshold(mem_budget)) are carved, none where keeps are to be remapped
  // (KeepPath::kRemap moves pages of mapped blocks).
  explicit PoolAllocator(HugePages policy = HugePages::kAuto, const TransitionOptions& engine = {});
  // As above with the mode given (tests: kNever turns huge pages off under kAuto).
  PoolAllocator(HugePages policy, ThpMode mode, const TransitionOptions& engine = {});
  ~PoolAllocator() override;
  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;

  // Throws InvariantError for bytes == 0 and std::bad_alloc when the system has no memory.
  std::byte* allocate(std::size_t bytes) override;
  // `bytes` must be the size passed to allocate / reserve (InvariantError otherwise, or for a
  // pointer that this pool did not hand out). Live pages of a mapped block become spare pages.
  void release(std::byte* data, std::size_t bytes) override;

  // With huge pages, blocks of kMappedBytes up to this are carved out of slabs:
  // min(kHugeMinBytes, pagewise_threshold(mem_budget)) (kMappedBytes without huge pages or
  // with KeepPath::kRemap: nothing carved).
  std::size_t carve_below() const { return carve_below_; }
  // Page-wise memory (engine.h): every block of at least max(kMappedBytes, carve_below())
  // supports it (smaller ones are heap or slab blocks).
  std::size_t pagewise_min_bytes() const override { return std::max(kMappedBytes, carve_below_); }
  bool can_adopt() const override { return true; }
  bool can_move_pages() const override { return true; }
  bool huge_pages() const override { return huge_; }
  void move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                  std::size_t bytes) override;
  std::byte* reserve(std::size_t bytes) override;
  void commit(std::byte* base, std::size_t offset, std::size_t bytes) override;
  void decommit(std::byte* base, std::size_t offset, std::size_t bytes) override;

  // Makes sure the pool holds at least `bytes` of spare pages that are already touched
  // (allocating and touching fresh ones if needed; never counted as live; idle slab 2 MiB
  // pages count as spare). Returns the bytes
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
  // Bytes of the mapped blocks' address space (live, spare in place or empty) and the slabs'
  // resident pages, and what /proc/self/smaps shows in huge pages of those now (reads smaps: for
  // reports, not hot paths).
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
    bool slab = false;           // address space of whole 2 MiB pages mapped by the pool (else heap)
    std::vector<bool> resident;  // a slab's 2 MiB pages: resident, or empty address space
  };
  // A mapped block: its pages are kUntouched (never committed: empty address space), kLive,
  // kSpare (decommitted: a spare page in place), kMoved (its spare page was moved away by
  // mremap; empty address space again) or, in huge blocks only, kIdle (resident but not live:
  // committed with the rest of its 2 MiB page, or given back while that page is still partly
  // live). A huge block commits and gives back whole 2 MiB pages, so the spare pages it leaves
  // are whole 2 MiB pages that later commits move whole (no 4 KiB fragments pile up). A block's
  // addresses stay mapped until its release.
  enum PageState : std::uint8_t { kUntouched, kLive, kSpare, kMoved, kIdle };
  struct Mapped {
    std::size_t bytes = 0;  // block_bytes() of the size asked for
    std::size_t asked = 0;  // the size asked for, rounded to pages
    bool huge = false;      // in 2 MiB pages (advised; fresh pages populated at commit)
    std::vector<PageState> pages;
  };
  void insert_free(std::byte* p, Range r);
  void erase_free(std::map<std::byte*, Range>::iterator it);
  std::byte* allocate_small(std::size_t bytes);
  // A new chunk for a block of `bytes` (rounded): a slab with huge pages from kMappedBytes on,
  // else heap memory of exactly that size. Returns its id.
  std::uint32_t new_chunk(std::size_t bytes);
  // Makes the 2 MiB pages of slab `c` under [p, p + bytes) resident.
  void make_slab_resident(Chunk& c, std::byte* p, std::size_t bytes);
  // Calls fn(chunk, u) for each idle slab 2 MiB page (resident, wholly inside a free range: it
  // holds no block) until fn returns true; returns whether one did.
  template <typename Fn>
  bool each_idle_slab_unit(Fn&& fn);
  // Moves an idle slab 2 MiB page to `to` (2 MiB-aligned, outside every idle page); false when
  // no slab has one.
  bool take_slab_unit(std::byte* to);
  std::size_t idle_slab_bytes();  // the idle slab 2 MiB pages' bytes
  void release_small(std::byte* data, std::size_t bytes);
  // Frees chunk `it` (no live block; its one free range already erased): a slab's resident pages
  // become spare pages (or are unmapped without `keep_pages`), heap memory goes back to the heap.
  // Returns the bytes it held.
  std::size_t free_chunk(std::map<std::uint32_t, Chunk>::iterator it, bool keep_pages);
  std::byte* reserve_locked(std::size_t bytes);
  Mapped& mapped_block(std::byte* base, std::size_t offset, std::size_t bytes);
  void commit_locked(std::byte* base, std::size_t offset, std::size_t bytes);
  // commit / decommit of pages [first, last) of a huge block, 2 MiB page by 2 MiB page.
  void commit_units(Mapped& m, std::byte* base, std::size_t first, std::size_t last);
  void decommit_units(Mapped& m, std::byte* base, std::size_t first, std::size_t last);
  std::size_t fill_resident_unit(Mapped& m, std::byte* base, std::size_t a, std::size_t b);
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
  // Moves up to `units` whole 2 MiB pages of one spare run to [to, ...) in one mremap; returns
  // how many (0 when no spare run outside the target holds a whole 2 MiB page).
  std::size_t take_huge_units(std::byte* to, std::size_t units);
  const Mapped* owner_of(const std::byte* p) const;  // the mapped block holding p, if any
  void note_reserved();
  std::size_t reserved_locked() const { return small_reserved_ + mapped_live_ + idle_ + spare_; }

  const bool huge_;
  const std::size_t carve_below_;  // blocks below it are small blocks
  mutable std::mutex mu_;
  std::map<std::uint32_t, Chunk> chunks_;
  std::uint32_t next_chunk_ = 0;
  std::map<std::byte*, Range> free_;                // by address (for merging)
  std::multimap<std::size_t, std::byte*> by_size_;  // by size (for best fit)
  std::map<std::byte*, Range> used_;
  std::map<std::byte*, Mapped> mapped_;       // by base address
  std::map<std::byte*, std::size_t> spares_;  // spare page runs: address -> bytes
  // small_reserved_: heap chunks and the slabs' resident pages; idle_: kIdle pages.
  std::size_t small_reserved_ = 0, mapped_live_ = 0, idle_ = 0, spare_ = 0;
  std::size_t live_ = 0, peak_live_ = 0, peak_reserved_ = 0, fresh_ = 0, populated_ = 0;
};

}  // namespace dynatrain::exec
