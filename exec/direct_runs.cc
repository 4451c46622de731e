#include "exec/direct_runs.h"

#include <algorithm>

#include "exec/box_copy.h"

namespace dynatrain::exec {

std::vector<DirectRuns::BufRun> DirectRuns::chunk_runs(int peer, const Chunk& c, bool source) const {
  const auto& pieces = source ? plan_.send.at(peer) : plan_.recv.at(peer);
  std::vector<BufRun> out;
  for (const Range& rg : c.ranges) {
    const plan::Piece& p = pieces[rg.piece];
    const std::uint32_t b = source ? p.src_buffer : p.dst_buffer;
    g_.for_each_byte_run(p, rg.begin, rg.end, source, [&](std::uint64_t at, std::uint64_t n) {
      if (!out.empty() && out.back().buffer == b && out.back().at + out.back().bytes == at)
        out.back().bytes += n;
      else
        out.push_back({b, at, n});
    });
  }
  return out;
}

bool DirectRuns::chunk_direct(int peer, const Chunk& c, bool source) const {
  if (!pair_runs(peer)) return source ? send_direct(peer, c) != nullptr : recv_direct_offset(peer, c) >= 0;
  const std::size_t n = chunk_runs(peer, c, source).size();
  return n == 1 || n * kMinDirectRunBytes <= c.bytes;
}

std::pair<std::byte*, std::vector<comm::ByteRun>> DirectRuns::comm_runs(int peer, const Chunk& c, bool source) const {
  const std::vector<BufRun> runs = chunk_runs(peer, c, source);
  auto addr = [&](const BufRun& r) {
    return reinterpret_cast<std::uintptr_t>(source ? src_[r.buffer] : dst_[r.buffer]) + r.at;
  };
  std::uintptr_t lo = UINTPTR_MAX;
  for (const BufRun& r : runs) lo = std::min(lo, addr(r));
  std::vector<comm::ByteRun> out;
  out.reserve(runs.size());
  for (const BufRun& r : runs)
    out.push_back({static_cast<std::size_t>(addr(r) - lo), static_cast<std::size_t>(r.bytes)});
  return {reinterpret_cast<std::byte*>(lo), std::move(out)};
}

const std::byte* DirectRuns::send_direct(int peer, const Chunk& c) const {
  if (c.ranges.size() != 1) return nullptr;
  const Range& r = c.ranges[0];
  const plan::Piece& p = plan_.send.at(peer)[r.piece];
  const vps::Segment& s = g_.src_seg(p);
  const std::int64_t off = contiguous_offset(p.box, r.begin, r.end, s.box);
  if (off < 0) return nullptr;
  static const std::byte kFake{};
  const std::byte* base = src_[p.src_buffer] ? src_[p.src_buffer] : &kFake;
  return base + static_cast<std::size_t>(s.offset + off) * g_.elem(p.kind);
}

std::int64_t DirectRuns::recv_direct_offset(int peer, const Chunk& c) const {
  if (c.ranges.size() != 1) return -1;
  const Range& r = c.ranges[0];
  const plan::Piece& p = plan_.recv.at(peer)[r.piece];
  const vps::Segment& s = g_.dst_seg(p);
  const std::int64_t off = contiguous_offset(p.box, r.begin, r.end, s.box);
  return off < 0 ? -1 : s.offset + off;
}

std::uint32_t DirectRuns::traced_runs(int peer, const Chunk* c, bool direct, bool source) const {
  if (!c || !direct || !pair_runs(peer)) return 1;
  return static_cast<std::uint32_t>(std::max<std::size_t>(1, chunk_runs(peer, *c, source).size()));
}

}  // namespace dynatrain::exec
