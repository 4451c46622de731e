// PieceGeometry: where a plan piece's bytes sit in this rank's buffers.
//
// A piece names a segment of a source buffer (src_buffer, src_segment) and of a destination
// buffer (dst_buffer, dst_segment); its box lies inside both segments' boxes (the engine checks
// that before anything else). The byte runs of an element range [begin, end) of the piece (row-
// major elements of its box) are then byte ranges of that buffer, in increasing element order;
// a dim-0 range of a row-major box is one contiguous run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/box_copy.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::exec {

struct PieceGeometry {
  const vps::RankLayout& src;
  const vps::RankLayout& dst;
  const vps::ElemBytes& eb;

  std::size_t elem(vps::StateKind k) const { return static_cast<std::size_t>(eb[static_cast<int>(k)]); }
  std::uint64_t bytes(const plan::Piece& p) const { return static_cast<std::uint64_t>(p.box.numel()) * elem(p.kind); }
  const vps::Segment& src_seg(const plan::Piece& p) const { return src.buffers[p.src_buffer].segments[p.src_segment]; }
  const vps::Segment& dst_seg(const plan::Piece& p) const { return dst.buffers[p.dst_buffer].segments[p.dst_segment]; }

  // Calls fn(byte offset into the buffer, length) for each run of elements [begin, end) of `p`
  // in its source (`source`) or destination buffer.
  template <typename Fn>
  void for_each_byte_run(const plan::Piece& p, std::int64_t begin, std::int64_t end, bool source, Fn&& fn) const {
    const vps::Segment& s = source ? src_seg(p) : dst_seg(p);
    const std::uint64_t e = elem(p.kind);
    for_each_run(p.box, begin, end, s.box, [&](std::int64_t off, std::int64_t count) {
      fn(static_cast<std::uint64_t>(s.offset + off) * e, static_cast<std::uint64_t>(count) * e);
    });
  }
};

}  // namespace dynatrain::exec
