// The memory ledger: the engine's account of the state memory and staging a rank holds while a
// switch runs, and the allocator calls that make it real.
//
// Live bytes are accounted per buffer: whole buffers, or granules of page-wise ones (buffers
// larger than mem_budget / 16 when the allocator can give back parts of a block; a granule is a
// power of two of pages, about mem_budget / 32, between 64 KiB and 2 MiB).
// - A source buffer is live from the start; it is given back when its last byte has been read
//   (consume), a page-wise one granule by granule as each granule's last byte is read.
// - A destination buffer becomes live just before its first write (touch), a page-wise one is
//   reserved then and each granule committed before its first write (or, received granules,
//   all as the exchange starts: begin_receives); padding is zeroed when it becomes live, so
//   recycled memory leaks nothing.
// - Staging (depth slots per direction and link class) is live for the whole run.
// The dry run and the real run make the same calls in the same order; only the real one calls
// the allocator. So the dry run's peak() is the real run's, exactly.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "exec/engine.h"
#include "exec/keep_plan.h"
#include "exec/piece_geometry.h"
#include "exec/schedule_trace.h"
#include "plan/plan.h"

namespace dynatrain::exec {

// What the ledger knows before a run: buffer sizes, which buffers are page-wise, the granule,
// and the bytes every read of the plan takes from each granule of a page-wise source buffer.
struct BufferMemory {
  std::vector<std::uint64_t> src_size, dst_size;  // bytes of each buffer
  std::uint64_t granule = 0;
  std::vector<char> src_pagewise, dst_pagewise;
  std::vector<std::vector<std::uint64_t>> src_unread;  // page-wise source: unread bytes per granule
  std::vector<std::vector<char>> dst_received;         // page-wise destination: granules a receive writes

  std::size_t granules(std::uint64_t bytes) const { return static_cast<std::size_t>((bytes + granule - 1) / granule); }
  std::uint64_t granule_size(std::uint64_t buffer_bytes, std::size_t gi) const {
    return std::min<std::uint64_t>(granule, buffer_bytes - gi * granule);
  }
  // Calls fn(granule index, bytes of [at, at + n) in it) for every granule the range touches.
  template <typename Fn>
  void for_each_granule(std::uint64_t at, std::uint64_t n, Fn&& fn) const {
    while (n > 0) {
      const std::size_t gi = static_cast<std::size_t>(at / granule);
      const std::uint64_t part = std::min<std::uint64_t>(n, (gi + 1) * granule - at);
      fn(gi, part);
      at += part;
      n -= part;
    }
  }
  std::uint64_t pagewise_count() const;
};

// Chooses the granule and the page-wise buffers of `mem` (sizes already set), counts the reads
// of `plan`'s keeps and sends per granule and marks the granules its receives write.
// Handed-over (adopted) source buffers are destinations now and may still send: never
// decommitted granule by granule, so they stay whole.
void choose_pagewise(BufferMemory& mem, const plan::RankPlan& plan, const PieceGeometry& g, std::size_t mem_budget,
                     std::size_t alloc_pagewise_min, const Adoptions& adoptions);

// Staging slots per link class: [class][slot], nullptr in a dry run or where none is needed.
struct Staging {
  std::array<std::vector<std::byte*>, 2> send, recv;
  std::array<std::size_t, 2> send_bytes{}, recv_bytes{};  // per slot, per class
};

class MemoryLedger {
 public:
  // Holds every source buffer with bytes. `src_left`: per source buffer, the bytes its keeps
  // and sends must still read; `dst_filled`: the pages remapped keeps fill (never committed).
  MemoryLedger(const BufferMemory& mem, const std::vector<std::uint64_t>& src_left,
               const std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>>& dst_filled,
               const PieceGeometry& g, StateAllocator& alloc, std::vector<std::byte*>& src,
               std::vector<std::byte*>& dst, bool dry, ScheduleTrace* trace, TransitionStats& stats);

  // The run's first steps, in this order: adopted source buffers become their destination
  // buffers (in place: src keeps its pointers, sends still read them); buffers and granules
  // nobody reads are given back; staging is allocated.
  void hand_over(const Adoptions& adoptions, bool in_place);
  void release_unread_sources(const Adoptions& adoptions);
  Staging allocate_staging(int classes, const std::array<int, 2>& depth, const std::array<std::size_t, 2>& send_bytes,
                           const std::array<std::size_t, 2>& recv_bytes);

  // Called as the exchange starts. Every later event keeps the peak that committing the
  // granules receives write (BufferMemory::dst_received) right here would give (ahead_peak());
  // with `commit`, they are committed here, each buffer's stretches in one allocator call.
  // The two trajectories differ by exactly the bytes of those granules not yet committed, so a
  // dry run without `commit` predicts the peak of a run with it (ahead_peak()) and its own.
  void begin_receives(bool commit);
  std::uint64_t ahead_peak() const { return ahead_peak_; }
  std::uint64_t ahead_bytes() const { return ahead_bytes_; }  // uncommitted received granules at the start

  // Elements [begin, end) of `p` have been read from its source buffer.
  void consume(const plan::Piece& p, std::int64_t begin, std::int64_t end);
  // Elements [begin, end) of `p` are about to be written into its destination buffer.
  void touch(const plan::Piece& p, std::int64_t begin, std::int64_t end);

  // The run's last steps: every source buffer has been given back (InvariantError otherwise);
  // destination memory nothing was written to is made live, zeroed kinds zeroed whole; staging
  // is given back.
  void check_sources_drained() const;
  void materialise_destinations(std::uint32_t zeroed_kinds);
  void release_staging(const Staging& staging);

  bool dry() const { return dry_; }
  std::uint64_t peak() const { return peak_; }

 private:
  void grow(std::uint64_t bytes);
  void release_src(std::uint32_t b);
  void decommit_src(std::uint32_t b, std::size_t gi);
  void ensure_dst(std::uint32_t b);
  // Commits the granules [first, last) of page-wise destination buffer b not committed yet; each
  // stretch of consecutive ones is one allocator call (a pool moves its spare 2 MiB pages in with
  // as few mremaps as its spare runs allow, not one a granule). Accounted granule by granule.
  void commit_dst(std::uint32_t b, std::size_t first, std::size_t last);
  void commit_range(std::uint32_t b, std::uint64_t lo, std::uint64_t hi);
  // Granule gi of destination buffer b is written by a receive (BufferMemory::dst_received;
  // false where that was never computed).
  bool received(std::uint32_t b, std::size_t gi) const;
  void zero_padding(std::uint32_t b, std::uint64_t lo, std::uint64_t hi);

  const BufferMemory& mem_;
  const std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>>& dst_filled_;
  const PieceGeometry& g_;
  StateAllocator& alloc_;
  std::vector<std::byte*>& src_;
  std::vector<std::byte*>& dst_;
  const bool dry_;
  ScheduleTrace* trace_;
  TransitionStats& stats_;

  std::vector<std::uint64_t> left_;                 // per source buffer: bytes still to read
  std::vector<std::vector<std::uint64_t>> unread_;  // page-wise source: per granule
  std::vector<std::uint64_t> src_live_;             // live bytes of each source buffer
  std::vector<char> src_held_;                      // not yet given back
  std::vector<char> dst_live_;                      // allocated (whole) or reserved (page-wise)
  std::vector<std::vector<char>> committed_;        // page-wise destination: per granule
  std::uint64_t live_ = 0, peak_ = 0;
  // From begin_receives: bytes of received granules not committed yet, the bytes there were
  // then, and the peak live_ + pending_ reached (the peak had they been committed then).
  bool tracking_ = false;
  std::uint64_t pending_ = 0, ahead_bytes_ = 0, ahead_peak_ = 0;
};

}  // namespace dynatrain::exec
