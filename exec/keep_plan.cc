#include "exec/keep_plan.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "exec/box_copy.h"

namespace dynatrain::exec {
namespace {

bool zeroed(std::uint32_t kinds, vps::StateKind k) { return (kinds >> static_cast<int>(k)) & 1u; }

// In place: every buffer stays and is its own destination; sends still read it.
void adopt_in_place(const plan::RankPlan& plan, const PieceGeometry& g, std::uint32_t zeroed_kinds, Adoptions& a,
                    std::vector<std::uint64_t>& src_left, TransitionStats& stats) {
  DT_CHECK_EQ(g.src.buffers.size(), g.dst.buffers.size());
  for (const auto& p : plan.keep) {
    DT_CHECK(p.src_buffer == p.dst_buffer && p.src_segment == p.dst_segment, "in-place keep moves ", p.box.str());
    if (zeroed(zeroed_kinds, p.kind)) continue;
    a.bytes[p.src_buffer] += g.bytes(p);
    src_left[p.src_buffer] -= g.bytes(p);
  }
  for (std::size_t i = 0; i < g.src.buffers.size(); ++i) {
    a.src_to_dst[i] = a.dst_to_src[i] = static_cast<int>(i);
    stats.kept_zero_copy_bytes += a.bytes[i];
  }
}

constexpr std::uint64_t kNotIdentical = UINT64_MAX;

// Segment bytes of `b` when source buffer `a` holds the identical segments at identical
// offsets (same kind and size), else kNotIdentical.
std::uint64_t identical_segment_bytes(const vps::LocalBuffer& a, const vps::LocalBuffer& b, const PieceGeometry& g) {
  if (a.kind != b.kind || a.numel != b.numel || a.segments.size() != b.segments.size()) return kNotIdentical;
  std::uint64_t bytes = 0;
  for (std::size_t k = 0; k < a.segments.size(); ++k) {
    const auto& x = a.segments[k];
    const auto& y = b.segments[k];
    if (x.tensor != y.tensor || !(x.box == y.box) || x.offset != y.offset) return kNotIdentical;
    bytes += static_cast<std::uint64_t>(y.box.numel()) * g.elem(b.kind);
  }
  return bytes;
}

}  // namespace

Adoptions find_adoptions(const plan::RankPlan& plan, const PieceGeometry& g, bool can_adopt, bool in_place,
                         std::uint32_t zeroed_kinds, std::vector<std::uint64_t>& src_left, TransitionStats& stats) {
  Adoptions a;
  a.src_to_dst.assign(g.src.buffers.size(), -1);
  a.dst_to_src.assign(g.dst.buffers.size(), -1);
  a.bytes.assign(g.src.buffers.size(), 0);
  if (!can_adopt) return a;
  if (in_place) {
    adopt_in_place(plan, g, zeroed_kinds, a, src_left, stats);
    return a;
  }
  // Kept bytes per (source, destination) buffer of pieces that are whole segments in place, and
  // all kept bytes per source buffer.
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> kept;
  std::vector<std::uint64_t> kept_from(g.src.buffers.size(), 0);
  for (const auto& p : plan.keep) {
    if (zeroed(zeroed_kinds, p.kind)) continue;
    kept_from[p.src_buffer] += g.bytes(p);
    if (g.src_seg(p).offset == g.dst_seg(p).offset && g.src_seg(p).box == g.dst_seg(p).box && p.box == g.dst_seg(p).box)
      kept[{p.src_buffer, p.dst_buffer}] += g.bytes(p);
  }
  // A buffer that sends as well is handed over too: its bytes never change (every byte of the
  // destination is kept from it, so nothing writes there), and its other readers are sends
  // alone (no keep into another buffer, whose remap could take its pages).
  for (const auto& [ij, bytes] : kept) {
    const auto [i, j] = ij;
    if (a.src_to_dst[i] >= 0 || a.dst_to_src[j] >= 0 || kept_from[i] != bytes) continue;
    if (identical_segment_bytes(g.src.buffers[i], g.dst.buffers[j], g) != bytes) continue;
    a.src_to_dst[i] = static_cast<int>(j);
    a.bytes[i] = bytes;
    a.dst_to_src[j] = static_cast<int>(i);
    src_left[i] -= bytes;  // what it still sends
    stats.kept_zero_copy_bytes += bytes;
  }
  return a;
}

void adopt_zeroed(const PieceGeometry& g, std::uint32_t zeroed_kinds, const std::vector<std::byte*>& src,
                  Adoptions& a) {
  for (std::size_t i = 0; i < g.src.buffers.size(); ++i) {
    if (!zeroed(zeroed_kinds, g.src.buffers[i].kind) || a.src_to_dst[i] >= 0 || src[i] == nullptr) continue;
    for (std::size_t j = 0; j < g.dst.buffers.size(); ++j) {
      if (a.dst_to_src[j] >= 0 || identical_segment_bytes(g.src.buffers[i], g.dst.buffers[j], g) == kNotIdentical)
        continue;
      a.src_to_dst[i] = static_cast<int>(j);
      a.dst_to_src[j] = static_cast<int>(i);
      break;
    }
  }
}

namespace {

// A keep whose piece is one contiguous run on both sides at offsets congruent modulo the unit.
struct RemapCandidate {
  std::uint32_t keep = 0;
  std::uint64_t src_at = 0, dst_at = 0, bytes = 0;  // the piece's contiguous byte runs
};

std::vector<RemapCandidate> remap_candidates(const plan::RankPlan& plan, const PieceGeometry& g,
                                             std::uint64_t min_bytes, std::uint64_t unit,
                                             const std::vector<std::uint64_t>& src_size,
                                             const std::vector<std::uint64_t>& dst_size) {
  std::vector<RemapCandidate> out;
  for (std::uint32_t i = 0; i < plan.keep.size(); ++i) {
    const plan::Piece& p = plan.keep[i];
    if (src_size[p.src_buffer] < min_bytes || dst_size[p.dst_buffer] < min_bytes) continue;
    const std::int64_t n = p.box.numel();
    const std::int64_t so = contiguous_offset(p.box, 0, n, g.src_seg(p).box);
    const std::int64_t dof = contiguous_offset(p.box, 0, n, g.dst_seg(p).box);
    if (so < 0 || dof < 0) continue;
    const std::uint64_t e = g.elem(p.kind);
    const RemapCandidate c{i, static_cast<std::uint64_t>(g.src_seg(p).offset + so) * e,
                           static_cast<std::uint64_t>(g.dst_seg(p).offset + dof) * e,
                           static_cast<std::uint64_t>(n) * e};
    if (c.src_at % unit != c.dst_at % unit) continue;
    out.push_back(c);
  }
  return out;
}

// Bytes read from each page of the candidates' source buffers, by every keep and send (other
// buffers: empty).
std::vector<std::vector<std::uint32_t>> page_reads(const plan::RankPlan& plan, const PieceGeometry& g,
                                                   const std::vector<RemapCandidate>& cands,
                                                   const std::vector<std::uint64_t>& src_size) {
  std::vector<std::vector<std::uint32_t>> reads(src_size.size());
  for (const RemapCandidate& c : cands) {
    const std::uint32_t b = plan.keep[c.keep].src_buffer;
    if (reads[b].empty()) reads[b].assign((src_size[b] + kPageBytes - 1) / kPageBytes, 0);
  }
  auto count = [&](const plan::Piece& p) {
    auto& r = reads[p.src_buffer];
    if (r.empty()) return;
    g.for_each_byte_run(p, 0, p.box.numel(), true, [&](std::uint64_t at, std::uint64_t n) {
      while (n > 0) {
        const std::uint64_t part = std::min<std::uint64_t>(n, kPageBytes - at % kPageBytes);
        r[at / kPageBytes] += static_cast<std::uint32_t>(part);
        at += part;
        n -= part;
      }
    });
  };
  for (const auto& p : plan.keep) count(p);
  for (const auto& [q, v] : plan.send)
    for (const auto& p : v) count(p);
  return reads;
}

}  // namespace

KeepRemaps find_remaps(const plan::RankPlan& plan, const PieceGeometry& g, const StateAllocator& alloc,
                       const std::vector<std::uint64_t>& src_size, const std::vector<std::uint64_t>& dst_size,
                       std::uint64_t min_run_bytes, std::uint64_t unit) {
  DT_CHECK(unit >= kPageBytes && unit % kPageBytes == 0, "remap unit of ", unit, " bytes: not whole pages");
  KeepRemaps out;
  out.per_keep.assign(plan.keep.size(), {});
  out.dst_filled.assign(dst_size.size(), {});
  if (!alloc.can_move_pages() || min_run_bytes == UINT64_MAX) return out;
  std::vector<RemapCandidate> cands = remap_candidates(plan, g, alloc.pagewise_min_bytes(), unit, src_size, dst_size);
  if (cands.empty()) return out;
  const auto reads = page_reads(plan, g, cands, src_size);
  const auto src_of = [&](const RemapCandidate& c) { return plan.keep[c.keep].src_buffer; };
  const auto dst_of = [&](const RemapCandidate& c) { return plan.keep[c.keep].dst_buffer; };
  std::sort(cands.begin(), cands.end(), [&](const RemapCandidate& a, const RemapCandidate& b) {
    return std::pair(src_of(a), a.src_at) < std::pair(src_of(b), b.src_at);
  });
  // Chains: candidates that continue each other in one source and one destination buffer. Every
  // maximal stretch of a chain's whole pages that only its keeps read, cut inward to whole units
  // (source and destination offsets are congruent modulo the unit), at least min_run_bytes long,
  // is one move, listed with every keep of the chain it overlaps.
  for (std::size_t lo = 0, hi = 0; lo < cands.size(); lo = hi) {
    for (hi = lo + 1; hi < cands.size(); ++hi) {
      const RemapCandidate &a = cands[hi - 1], &b = cands[hi];
      if (src_of(a) != src_of(b) || dst_of(a) != dst_of(b) || b.src_at != a.src_at + a.bytes ||
          b.dst_at != a.dst_at + a.bytes)
        break;
    }
    const RemapCandidate& head = cands[lo];
    const std::uint64_t end_at = cands[hi - 1].src_at + cands[hi - 1].bytes;
    const auto& r = reads[src_of(head)];
    const std::uint64_t first = (head.src_at + kPageBytes - 1) / kPageBytes, last = end_at / kPageBytes;
    for (std::uint64_t pg = first; pg < last;) {
      if (r[pg] != kPageBytes) {
        ++pg;
        continue;
      }
      std::uint64_t end = pg;
      while (end < last && r[end] == kPageBytes) ++end;
      const std::uint64_t at = (pg * kPageBytes + unit - 1) / unit * unit, stop = end * kPageBytes / unit * unit;
      pg = end;
      if (stop <= at || stop - at < min_run_bytes) continue;  // no whole unit, or measured slower than a copy
      const Remap move{at, at - head.src_at + head.dst_at, stop - at, out.moves++};
      for (std::size_t k = lo; k < hi; ++k)
        if (cands[k].src_at < stop && cands[k].src_at + cands[k].bytes > at)
          out.per_keep[cands[k].keep].push_back(move);
      out.dst_filled[dst_of(head)].push_back({move.dst_at, move.bytes});
    }
  }
  for (auto& v : out.dst_filled) std::sort(v.begin(), v.end());
  return out;
}

namespace {

// The piece's contiguous byte runs: its offset in the source and in the destination buffer.
std::pair<std::uint64_t, std::uint64_t> contiguous_at(const plan::Piece& p, const PieceGeometry& g) {
  const std::size_t e = g.elem(p.kind);
  const auto& s = g.src_seg(p);
  const auto& d = g.dst_seg(p);
  return {static_cast<std::uint64_t>(s.offset + contiguous_offset(p.box, 0, p.box.numel(), s.box)) * e,
          static_cast<std::uint64_t>(d.offset + contiguous_offset(p.box, 0, p.box.numel(), d.box)) * e};
}

}  // namespace

std::uint64_t remapped_bytes(const plan::Piece& p, const std::vector<Remap>& remaps, const PieceGeometry& g) {
  if (remaps.empty()) return 0;
  const std::uint64_t from = contiguous_at(p, g).first, to = from + g.bytes(p);
  std::uint64_t n = 0;
  for (const Remap& r : remaps) n += std::min(to, r.src_at + r.bytes) - std::max(from, r.src_at);
  return n;
}

void run_keep(const plan::Piece& p, const std::vector<Remap>& remaps, const PieceGeometry& g,
              const std::vector<std::byte*>& src_bufs, const std::vector<std::byte*>& dst_bufs, StateAllocator& alloc,
              std::vector<std::uint8_t>& moved, TransitionStats& stats) {
  const auto& s = g.src_seg(p);
  const auto& d = g.dst_seg(p);
  const std::size_t e = g.elem(p.kind);
  std::byte* src = src_bufs[p.src_buffer];
  std::byte* dst = dst_bufs[p.dst_buffer];
  if (remaps.empty()) {
    copy_box(p.box, src + s.offset * e, s.box, dst + d.offset * e, d.box, e, alloc);
    return;
  }
  const auto [src_at, dst_at] = contiguous_at(p, g);
  const std::uint64_t end = src_at + g.bytes(p);
  std::uint64_t at = src_at;  // source bytes [src_at, at) are done
  for (const Remap& r : remaps) {
    if (r.src_at > at) alloc.copy(dst + (at - src_at + dst_at), src + at, r.src_at - at);
    if (!moved[r.move]) {  // the first keep of its chain to run moves it whole
      alloc.move_pages(src, r.src_at, dst, r.dst_at, r.bytes);
      stats.kept_remapped_bytes += r.bytes;
      moved[r.move] = 1;
    }
    at = std::min(end, r.src_at + r.bytes);
  }
  if (end > at) alloc.copy(dst + (at - src_at + dst_at), src + at, end - at);
}

}  // namespace dynatrain::exec
