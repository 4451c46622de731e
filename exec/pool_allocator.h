// PoolAllocator: a StateAllocator that recycles released blocks, so destination state is built
// in the memory the source state gave back (first touch of fresh memory is ~0.25 GB/s on the
// target machines, 50-100x slower than writing warm memory).
//
//   allocate(n)  rounds n up to 64 bytes; takes the smallest free range >= n (best fit), splits
//                off the rest; only when none fits does it reserve a fresh chunk of exactly n.
//   release      returns the range; it merges with free neighbours of the same chunk.
//   trim()       gives wholly free chunks back to the system.
//
// Accounting (what tests and the CLI report):
//   live      bytes handed out and not yet released (rounded sizes)    -> peak_live()
//   reserved  bytes of all chunks obtained from the system             -> peak_reserved()
//   fresh     bytes ever obtained from the system (first-touch cost)   -> fresh_bytes()
// reserved >= live; the difference is free ranges too small or too scattered to reuse.
// Thread-safe (one mutex); the engine calls it from one thread per rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "exec/engine.h"

namespace dynatrain::exec {

class PoolAllocator final : public StateAllocator {
 public:
  static constexpr std::size_t kAlign = 64;

  PoolAllocator() = default;
  ~PoolAllocator() override;
  PoolAllocator(const PoolAllocator&) = delete;
  PoolAllocator& operator=(const PoolAllocator&) = delete;

  // Throws InvariantError for bytes == 0 and std::bad_alloc when the system has no memory.
  std::byte* allocate(std::size_t bytes) override;
  // `bytes` must be the size passed to allocate (InvariantError otherwise, or for a pointer
  // that this pool did not hand out).
  void release(std::byte* data, std::size_t bytes) override;

  // Makes sure the pool holds at least `bytes` of free memory that is already touched:
  // allocates and touches (writes every page of) a fresh chunk for what is missing, never
  // counting it as live. Returns the bytes newly touched (0 if enough was free).
  std::size_t prefault(std::size_t bytes);
  // Frees chunks that hold no live block. Returns the bytes given back.
  std::size_t trim();
  // Restarts peak_live/peak_reserved at the current values.
  void reset_peaks();

  std::size_t live_bytes() const;
  std::size_t peak_live() const;
  std::size_t reserved_bytes() const;
  std::size_t peak_reserved() const;
  std::size_t fresh_bytes() const;

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
  void insert_free(std::byte* p, Range r);
  void erase_free(std::map<std::byte*, Range>::iterator it);

  mutable std::mutex mu_;
  std::map<std::uint32_t, Chunk> chunks_;
  std::uint32_t next_chunk_ = 0;
  std::map<std::byte*, Range> free_;                  // by address (for merging)
  std::multimap<std::size_t, std::byte*> by_size_;    // by size (for best fit)
  std::map<std::byte*, Range> used_;
  std::size_t live_ = 0, peak_live_ = 0, reserved_ = 0, peak_reserved_ = 0, fresh_ = 0;
};

}  // namespace dynatrain::exec
