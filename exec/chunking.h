// Chunking: how the pieces one rank sends to (or receives from) one peer in one wave are cut
// into messages of bounded size.
//
// A chunk is a list of element ranges of pieces, in plan order, of at most `cap` bytes, whole
// elements only (cut_chunks is greedy: a chunk takes elements until the next one would not
// fit). Both ranks of a pair cut the identical piece list (the sender's send[peer] is the
// receiver's recv[peer]) with the identical capacity, so chunk k of the sender is chunk k of the
// receiver, element for element, without exchanging any metadata. The capacity follows from the
// budget and the rounds in flight so that all staging slots together stay <= mem_budget / 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::exec {

struct Range {
  std::uint32_t piece = 0;          // index into the peer's piece list
  std::int64_t begin = 0, end = 0;  // row-major elements of the piece's box
};

struct Chunk {
  std::vector<Range> ranges;
  std::size_t bytes = 0;
  bool direct = false;  // this side moves it without staging (DirectRuns::chunk_direct)
};

// The chunks one rank exchanges with one peer in one wave, each direction on its own.
struct PeerWork {
  std::vector<Chunk> send, recv;
};

// Per wave, per peer: what the rank exchanges with that peer (peers with nothing absent).
using WaveWork = std::vector<std::map<int, PeerWork>>;

// The chunk capacity for `slots` rounds in flight over all link classes: 2 * slots staging
// slots (send and receive) of at most budget / (4 * slots) bytes, a multiple of 8.
std::size_t chunk_capacity(std::size_t mem_budget, int slots);

// Greedy, element-granular: cuts the pieces `order` (indices into `pieces`, in that order)
// into chunks of at most `cap` bytes. `cap` must hold at least one element of every kind.
std::vector<Chunk> cut_chunks(const std::vector<plan::Piece>& pieces, const std::vector<std::uint32_t>& order,
                              const vps::ElemBytes& eb, std::size_t cap);

// The chunks of every (wave, peer) of `plan`'s sends and receives: the pieces of each wave,
// in plan order, cut by cut_chunks. `wave_of(piece, source)` is the wave of a send piece
// (source: true) or a receive piece (false), in [0, waves).
WaveWork cut_wave_chunks(const plan::RankPlan& plan, int waves, const vps::ElemBytes& eb, std::size_t cap,
                         const std::function<int(const plan::Piece&, bool source)>& wave_of);

}  // namespace dynatrain::exec
