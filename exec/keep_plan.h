// Keep planning: which kept bytes are not copied at all, and which are moved page by page.
//
// Zero-copy keeps (Adoptions): destination buffer j *is* source buffer i, handed over as it is,
// when the allocator allows it (can_adopt), both hold the identical segments at identical
// offsets (same kind and size), the plan keeps every segment byte of j from i, and i is read
// otherwise by sends alone (they read j then: nothing writes into j; no keep of i into another
// buffer, whose page remap could take i's pages); in place (TransitionOptions::in_place) every buffer is its own destination. An
// adopted buffer's kept pieces leave the plan; its bytes never enter the memory accounting twice.
//
// Remapped keeps (KeepRemaps): a kept piece that is one contiguous run in its source and in its
// destination buffer, both page-mapped blocks (>= pagewise_min_bytes) at byte offsets congruent
// modulo a page, has its whole pages moved (StateAllocator::move_pages) instead of copied; the
// partial pages at its ends are copied. A source page qualifies only when that keep is its only
// reader (moving takes it away). Memory is accounted exactly as for a copy, so the dry run and
// the predicted peak do not change; the destination pages a remap fills are never committed.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "exec/engine.h"
#include "exec/piece_geometry.h"
#include "plan/plan.h"

namespace dynatrain::exec {

struct Adoptions {
  std::vector<int> src_to_dst;       // per source buffer: the destination buffer it becomes, or -1
  std::vector<int> dst_to_src;       // per destination buffer: the source buffer it is, or -1
  std::vector<std::uint64_t> bytes;  // per source buffer: its kept segment bytes (adopted ones)

  bool adopted(const plan::Piece& p) const { return src_to_dst[p.src_buffer] == static_cast<int>(p.dst_buffer); }
};

// The buffers handed over. `src_left` (bytes each source buffer must still send or keep) loses
// the adopted keeps; `stats.kept_zero_copy_bytes` gains them. Pieces of `zeroed_kinds` count
// for nothing.
Adoptions find_adoptions(const plan::RankPlan& plan, const PieceGeometry& g, bool can_adopt, bool in_place,
                         std::uint32_t zeroed_kinds, std::vector<std::uint64_t>& src_left, TransitionStats& stats);

// Hands over each held source buffer (`src` not null) of a zeroed kind laid out identically in
// both layouts to its destination, which is then zeroed in place: no allocation and no pages
// committed. Nothing reads it (a zeroed kind sends and keeps nothing), so its bytes are free.
void adopt_zeroed(const PieceGeometry& g, std::uint32_t zeroed_kinds, const std::vector<std::byte*>& src, Adoptions& a);

// Whole pages of kept runs moved by one StateAllocator::move_pages: byte offsets into the source
// and the destination buffer (multiples of kPageBytes), the length, and the move's number. One
// move may span several keeps that continue each other on both sides (a ZeRO shard's tensors):
// whichever of them runs first moves it, the others skip their part of it.
struct Remap {
  std::uint64_t src_at = 0, dst_at = 0, bytes = 0;
  std::uint32_t move = 0;  // index into the moves made (KeepRemaps::moves)
};

struct KeepRemaps {
  std::vector<std::vector<Remap>> per_keep;  // per plan.keep piece: the moves it overlaps, in source order
  std::uint32_t moves = 0;                   // distinct moves
  // Per destination buffer: the (byte offset, bytes) page ranges remapped keeps fill, sorted.
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> dst_filled;
};

// The remapped keeps of `plan` (keeps already cut at slab boundaries, adoptions left out);
// none unless the allocator can_move_pages(). `src_size` / `dst_size`: bytes of each buffer.
// Only stretches of at least `min_run_bytes` are remapped (the measured break-even of a remap
// against a copy; UINT64_MAX: none); shorter ones are copied. `unit` (a multiple of kPageBytes):
// a remap moves whole units at offsets congruent modulo it on both sides -- kHugePageBytes for
// state in 2 MiB pages, whose page-table entries then move whole instead of being split.
KeepRemaps find_remaps(const plan::RankPlan& plan, const PieceGeometry& g, const StateAllocator& alloc,
                       const std::vector<std::uint64_t>& src_size, const std::vector<std::uint64_t>& dst_size,
                       std::uint64_t min_run_bytes, std::uint64_t unit = kPageBytes);

// Performs one keep (real run only): a copy of the piece's box, or, with remaps, the moves it
// overlaps made (those not yet `moved`, which it marks) and its other bytes copied. Adds to
// stats.kept_remapped_bytes.
void run_keep(const plan::Piece& p, const std::vector<Remap>& remaps, const PieceGeometry& g,
              const std::vector<std::byte*>& src, const std::vector<std::byte*>& dst, StateAllocator& alloc,
              std::vector<std::uint8_t>& moved, TransitionStats& stats);

// Bytes of keep `p` that its remaps move (its overlap with them): what it does not copy.
std::uint64_t remapped_bytes(const plan::Piece& p, const std::vector<Remap>& remaps, const PieceGeometry& g);

}  // namespace dynatrain::exec
