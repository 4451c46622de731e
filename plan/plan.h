// The routing plan of one switch: for every rank, what it keeps, sends and receives.
//
// A Piece moves one box of one (tensor, state kind) from a segment of a source buffer on
// `src_rank` (source layout) to a segment of a destination buffer on `dst_rank` (destination
// layout). `box` lies inside both segments' boxes. Keeps have src_rank == dst_rank.
// src_rank, dst_rank and RankPlan::rank are processes (plan/placement.h); the buffer and
// segment ids refer to the layout rank that process holds.
//
// Ordering contract: RankPlan::send[p] on rank r and RankPlan::recv[r] on rank p list the same
// pieces in the same order (sorted by piece_order), so both sides can pack and unpack one
// contiguous buffer per peer without exchanging metadata.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vps/box.h"
#include "vps/layout.h"

namespace dynatrain::plan {

struct Piece {
  std::uint32_t tensor = 0;
  vps::StateKind kind = vps::StateKind::kParam;
  vps::Box box;
  int src_rank = 0;
  std::uint32_t src_buffer = 0;   // LocalBuffer id in the source RankLayout of src_rank
  std::uint32_t src_segment = 0;  // index into that buffer's segments
  int dst_rank = 0;
  std::uint32_t dst_buffer = 0;  // LocalBuffer id in the destination RankLayout of dst_rank
  std::uint32_t dst_segment = 0;

  friend bool operator==(const Piece&, const Piece&) = default;
};

// The canonical order of pieces inside one message: destination buffer, then segment, then box.
bool piece_order(const Piece& a, const Piece& b);

struct RankPlan {
  int rank = 0;
  std::vector<Piece> keep;
  std::map<int, std::vector<Piece>> send;  // peer -> pieces, peer != rank
  std::map<int, std::vector<Piece>> recv;  // peer -> pieces, peer != rank
};

// Where processes run: process p sits on node p / gpus_per_node. Which process holds which rank
// of each layout is the switch's placement (plan/placement.h; identity by default, when
// processes and ranks coincide).
struct Topology {
  int gpus_per_node = 8;
  int node_of(int rank) const { return rank / gpus_per_node; }
};

}  // namespace dynatrain::plan
