#include "exec/memory_ledger.h"

#include <algorithm>

#include "common/clock.h"
#include "common/error.h"

namespace dynatrain::exec {

std::uint64_t BufferMemory::pagewise_count() const {
  return static_cast<std::uint64_t>(std::count(src_pagewise.begin(), src_pagewise.end(), 1) +
                                    std::count(dst_pagewise.begin(), dst_pagewise.end(), 1));
}

void choose_pagewise(BufferMemory& mem, const plan::RankPlan& plan, const PieceGeometry& g, std::size_t mem_budget,
                     std::size_t alloc_pagewise_min, const Adoptions& adoptions) {
  std::size_t granule = 64 << 10;
  while (granule * 2 <= mem_budget / 32 && granule < (2u << 20)) granule *= 2;
  mem.granule = granule;
  const std::uint64_t min_bytes = std::max<std::uint64_t>(pagewise_threshold(mem_budget), alloc_pagewise_min);
  const std::size_t ns = mem.src_size.size(), nd = mem.dst_size.size();
  mem.src_pagewise.assign(ns, 0);
  mem.dst_pagewise.assign(nd, 0);
  for (std::size_t b = 0; b < ns; ++b)
    mem.src_pagewise[b] =
        mem.src_size[b] >= min_bytes && adoptions.src_to_dst[b] < 0;  // never decommit a handed-over one
  for (std::size_t b = 0; b < nd; ++b) mem.dst_pagewise[b] = mem.dst_size[b] >= min_bytes;
  // Unread bytes per granule of each page-wise source buffer, over every read of the plan.
  mem.src_unread.assign(ns, {});
  for (std::size_t b = 0; b < ns; ++b)
    if (mem.src_pagewise[b]) mem.src_unread[b].assign(mem.granules(mem.src_size[b]), 0);
  auto count_reads = [&](const plan::Piece& p) {
    if (!mem.src_pagewise[p.src_buffer]) return;
    auto& u = mem.src_unread[p.src_buffer];
    g.for_each_byte_run(p, 0, p.box.numel(), true, [&](std::uint64_t at, std::uint64_t n) {
      mem.for_each_granule(at, n, [&](std::size_t gi, std::uint64_t part) { u[gi] += part; });
    });
  };
  for (const auto& p : plan.keep) count_reads(p);
  for (const auto& [q, v] : plan.send)
    for (const auto& p : v) count_reads(p);
  mem.dst_received.assign(nd, {});
  for (const auto& [q, v] : plan.recv)
    for (const auto& p : v) {
      if (!mem.dst_pagewise[p.dst_buffer]) continue;
      auto& r = mem.dst_received[p.dst_buffer];
      if (r.empty()) r.assign(mem.granules(mem.dst_size[p.dst_buffer]), 0);
      g.for_each_byte_run(p, 0, p.box.numel(), false, [&](std::uint64_t at, std::uint64_t n) {
        mem.for_each_granule(at, n, [&](std::size_t gi, std::uint64_t) { r[gi] = 1; });
      });
    }
}

MemoryLedger::MemoryLedger(const BufferMemory& mem, const std::vector<std::uint64_t>& src_left,
                           const std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>>& dst_filled,
                           const PieceGeometry& g, StateAllocator& alloc, std::vector<std::byte*>& src,
                           std::vector<std::byte*>& dst, bool dry, ScheduleTrace* trace, TransitionStats& stats)
    : mem_(mem),
      dst_filled_(dst_filled),
      g_(g),
      alloc_(alloc),
      src_(src),
      dst_(dst),
      dry_(dry),
      trace_(trace),
      stats_(stats),
      left_(src_left),
      unread_(mem.src_unread),
      src_live_(mem.src_size) {
  src_held_.assign(mem.src_size.size(), 0);
  dst_live_.assign(mem.dst_size.size(), 0);
  committed_.assign(mem.dst_size.size(), {});
  for (std::size_t i = 0; i < mem.src_size.size(); ++i)
    if (mem.src_size[i] > 0) {
      src_held_[i] = 1;
      grow(mem.src_size[i]);
    }
}

void MemoryLedger::grow(std::uint64_t bytes) {
  live_ += bytes;
  peak_ = std::max(peak_, live_);
  if (tracking_) ahead_peak_ = std::max(ahead_peak_, live_ + pending_);
}

bool MemoryLedger::received(std::uint32_t b, std::size_t gi) const {
  return b < mem_.dst_received.size() && gi < mem_.dst_received[b].size() && mem_.dst_received[b][gi];
}

void MemoryLedger::begin_receives(bool commit) {
  pending_ = 0;
  for (std::uint32_t b = 0; b < mem_.dst_received.size(); ++b)
    for (std::size_t gi = 0; gi < mem_.dst_received[b].size(); ++gi)
      if (received(b, gi) && (committed_[b].empty() || !committed_[b][gi]))
        pending_ += mem_.granule_size(mem_.dst_size[b], gi);
  ahead_bytes_ = pending_;
  ahead_peak_ = std::max(peak_, live_ + pending_);
  tracking_ = true;
  if (!commit || pending_ == 0) return;
  for (std::uint32_t b = 0; b < mem_.dst_received.size(); ++b) {
    const auto& r = mem_.dst_received[b];
    if (std::find(r.begin(), r.end(), 1) == r.end()) continue;
    ensure_dst(b);
    for (std::size_t gi = 0; gi < r.size();) {  // commit_dst joins consecutive granules into one call
      if (!r[gi]) {
        ++gi;
        continue;
      }
      const std::size_t first = gi;
      while (gi < r.size() && r[gi]) ++gi;
      commit_dst(b, first, gi);
    }
  }
}

void MemoryLedger::hand_over(const Adoptions& adoptions, bool in_place) {
  for (std::uint32_t i = 0; i < mem_.src_size.size(); ++i) {
    const int j = adoptions.src_to_dst[i];
    if (j < 0) continue;
    src_held_[i] = 0;
    src_live_[i] = 0;
    dst_live_[j] = 1;
    if (mem_.dst_pagewise[j]) committed_[j].assign(mem_.granules(mem_.dst_size[j]), 1);
    if (dry_) continue;
    dst_[j] = src_[i];
    if (!in_place && left_[i] == 0) src_[i] = nullptr;  // else sends still read it (cleared at the end)
    zero_padding(static_cast<std::uint32_t>(j), 0, mem_.dst_size[j]);
    stats_.bytes_kept += adoptions.bytes[i];
  }
}

void MemoryLedger::release_unread_sources(const Adoptions& adoptions) {
  for (std::uint32_t i = 0; i < mem_.src_size.size(); ++i) {
    if (adoptions.src_to_dst[i] >= 0) continue;
    if (left_[i] == 0) {
      release_src(i);
    } else if (mem_.src_pagewise[i]) {
      for (std::size_t gi = 0; gi < unread_[i].size(); ++gi)
        if (unread_[i][gi] == 0) decommit_src(i, gi);
    }
  }
}

Staging MemoryLedger::allocate_staging(int classes, const std::array<int, 2>& depth,
                                       const std::array<std::size_t, 2>& send_bytes,
                                       const std::array<std::size_t, 2>& recv_bytes) {
  Staging s;
  s.send_bytes = send_bytes;
  s.recv_bytes = recv_bytes;
  for (int c = 0; c < 2; ++c) s.send[c].assign(depth[c], nullptr), s.recv[c].assign(depth[c], nullptr);
  std::uint64_t staging = 0;
  for (int c = 0; c < classes; ++c) staging += depth[c] * (send_bytes[c] + recv_bytes[c]);
  grow(staging);
  if (dry_) return s;
  stats_.staging_bytes = staging;
  for (int c = 0; c < classes; ++c)
    for (int i = 0; i < depth[c]; ++i) {
      if (send_bytes[c]) s.send[c][i] = alloc_.allocate(send_bytes[c]);
      if (recv_bytes[c]) s.recv[c][i] = alloc_.allocate(recv_bytes[c]);
    }
  return s;
}

void MemoryLedger::release_staging(const Staging& s) {
  if (dry_) return;
  for (int c = 0; c < 2; ++c)
    for (std::size_t i = 0; i < s.send[c].size(); ++i) {
      if (s.send[c][i]) alloc_.release(s.send[c][i], s.send_bytes[c]);
      if (s.recv[c][i]) alloc_.release(s.recv[c][i], s.recv_bytes[c]);
    }
}

void MemoryLedger::release_src(std::uint32_t b) {
  if (!src_held_[b]) return;
  src_held_[b] = 0;
  live_ -= src_live_[b];
  src_live_[b] = 0;
  if (dry_) return;
  alloc_.release(src_[b], mem_.src_size[b]);
  src_[b] = nullptr;
}

void MemoryLedger::decommit_src(std::uint32_t b, std::size_t gi) {
  const std::uint64_t n = mem_.granule_size(mem_.src_size[b], gi);
  live_ -= n;
  src_live_[b] -= n;
  if (!dry_) alloc_.decommit(src_[b], gi * mem_.granule, n);
}

void MemoryLedger::consume(const plan::Piece& p, std::int64_t begin, std::int64_t end) {
  const std::uint32_t b = p.src_buffer;
  const std::uint64_t bytes = static_cast<std::uint64_t>(end - begin) * g_.elem(p.kind);
  DT_CHECK(left_[b] >= bytes, "source buffer ", b, " over-consumed");
  left_[b] -= bytes;
  if (mem_.src_pagewise[b]) {
    auto& u = unread_[b];
    g_.for_each_byte_run(p, begin, end, true, [&](std::uint64_t at, std::uint64_t n) {
      mem_.for_each_granule(at, n, [&](std::size_t gi, std::uint64_t part) {
        u[gi] -= part;
        if (u[gi] == 0) decommit_src(b, gi);
      });
    });
  }
  if (left_[b] == 0) release_src(b);
}

void MemoryLedger::ensure_dst(std::uint32_t b) {
  const std::uint64_t size = mem_.dst_size[b];
  if (dst_live_[b] || size == 0) return;
  dst_live_[b] = 1;
  if (mem_.dst_pagewise[b]) {  // address space only; granules become live when written
    committed_[b].assign(mem_.granules(size), 0);
    if (!dry_) dst_[b] = alloc_.reserve(size);
    return;
  }
  grow(size);
  if (trace_) trace_->fresh(size);
  if (dry_) return;
  const auto t0 = Clock::now();
  if (dst_filled_[b].empty()) {
    dst_[b] = alloc_.allocate_destination(g_.dst.buffers[b], size);
  } else {  // remapped keeps fill some of its pages: only the others are committed
    dst_[b] = alloc_.reserve(size);
    commit_range(b, 0, size);
  }
  zero_padding(b, 0, size);
  stats_.alloc_seconds += seconds_since(t0);
}

void MemoryLedger::zero_padding(std::uint32_t b, std::uint64_t lo, std::uint64_t hi) {
  const auto& buf = g_.dst.buffers[b];
  const std::uint64_t e = g_.elem(buf.kind);
  auto zero = [&](std::uint64_t a, std::uint64_t z) {
    a = std::max(a, lo), z = std::min(z, hi);
    if (a < z) alloc_.zero(dst_[b] + a, z - a);
  };
  std::uint64_t at = 0;
  for (const auto& s : buf.segments) {
    const std::uint64_t from = static_cast<std::uint64_t>(s.offset) * e;
    if (from > at) zero(at, from);
    at = std::max(at, static_cast<std::uint64_t>(s.offset + s.box.numel()) * e);
  }
  zero(at, mem_.dst_size[b]);
}

void MemoryLedger::commit_range(std::uint32_t b, std::uint64_t lo, std::uint64_t hi) {
  auto commit = [&](std::uint64_t from, std::uint64_t to) {
    alloc_.commit(dst_[b], from, to - from);
    ++stats_.commit_calls;
  };
  for (const auto& [at, bytes] : dst_filled_[b]) {
    if (at >= hi) break;
    if (at + bytes <= lo) continue;
    if (at > lo) commit(lo, at);
    lo = std::max(lo, at + bytes);
  }
  if (lo < hi) commit(lo, hi);
}

void MemoryLedger::commit_dst(std::uint32_t b, std::size_t first, std::size_t last) {
  auto& committed = committed_[b];
  for (std::size_t gi = first; gi < last;) {
    if (committed[gi]) {
      ++gi;
      continue;
    }
    const std::size_t from = gi;
    for (; gi < last && !committed[gi]; ++gi) {  // accounted granule by granule, as the dry run
      committed[gi] = 1;
      const std::uint64_t n = mem_.granule_size(mem_.dst_size[b], gi);
      if (tracking_ && received(b, gi)) pending_ -= n;
      grow(n);
      if (trace_) trace_->fresh(n);
    }
    if (dry_) continue;
    const auto t0 = Clock::now();
    const std::uint64_t lo = from * mem_.granule, hi = std::min<std::uint64_t>(gi * mem_.granule, mem_.dst_size[b]);
    commit_range(b, lo, hi);
    zero_padding(b, lo, hi);
    stats_.alloc_seconds += seconds_since(t0);
  }
}

void MemoryLedger::touch(const plan::Piece& p, std::int64_t begin, std::int64_t end) {
  const std::uint32_t b = p.dst_buffer;
  ensure_dst(b);
  if (!mem_.dst_pagewise[b]) return;
  g_.for_each_byte_run(p, begin, end, false, [&](std::uint64_t at, std::uint64_t n) {
    if (n > 0) commit_dst(b, at / mem_.granule, (at + n - 1) / mem_.granule + 1);
  });
}

void MemoryLedger::check_sources_drained() const {
  for (std::uint32_t b = 0; b < mem_.src_size.size(); ++b)
    DT_CHECK(!src_held_[b], "source buffer ", b, " still holds ", left_[b], " unsent bytes");
}

void MemoryLedger::materialise_destinations(std::uint32_t zeroed_kinds) {
  for (std::uint32_t b = 0; b < mem_.dst_size.size(); ++b) {
    ensure_dst(b);
    commit_dst(b, 0, committed_[b].size());
    const bool zeroed = (zeroed_kinds >> static_cast<int>(g_.dst.buffers[b].kind)) & 1u;
    if (!dry_ && mem_.dst_size[b] > 0 && zeroed) {
      const auto t0 = Clock::now();
      alloc_.zero(dst_[b], mem_.dst_size[b]);
      stats_.alloc_seconds += seconds_since(t0);
    }
  }
}

}  // namespace dynatrain::exec
