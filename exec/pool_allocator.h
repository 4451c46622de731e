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
//                needed by the fastest way measured here (exec/machine_rates.h: huge pages +
//                MADV_POPULATE_WRITE, MADV_POPULATE_WRITE, or a write a page).
//   move_pages   moves live pages of one mapped block into not-live pages of another (mremap):
//                the engine's remapped keeps; live bytes do not change.
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
#include <vector>

#include "exec/engine.h"

namespace dynatrain::exec {

class PoolAllocator final : public StateAllocator {
 public:
  static constexpr std::size_t kAlign = 64;
  static constexpr std::size_t kMappedBytes = 64 << 10;  // blocks this large are page-mapped

  PoolAllocator() = default;
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
    std::size_t bytes = 0;  // rounded to pages
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
  std::size_t take_spares(std::byte* to, std::size_t bytes);
  void add_spare(std::byte* p, std::size_t bytes);
  void note_reserved();

  mutable std::mutex mu_;
  std::map<std::uint32_t, Chunk> chunks_;
  std::uint32_t next_chunk_ = 0;
  std::map<std::byte*, Range> free_;                // by address (for merging)
  std::multimap<std::size_t, std::byte*> by_size_;  // by size (for best fit)
  std::map<std::byte*, Range> used_;
  std::map<std::byte*, Mapped> mapped_;       // by base address
  std::map<std::byte*, std::size_t> spares_;  // spare page runs: address -> bytes
  std::size_t small_reserved_ = 0, mapped_live_ = 0, spare_ = 0;
  std::size_t live_ = 0, peak_live_ = 0, peak_reserved_ = 0, fresh_ = 0;
};

}  // namespace dynatrain::exec
