// Direct runs: which chunks travel without staging, and the byte runs they travel from / to.
//
// A pair whose transport moves scattered messages straight from runs to runs
// (comm::Transport::runs_direct, the same answer on both ranks; TransitionOptions::direct_runs)
// sends every chunk with isend_runs / irecv_runs, and each side decides alone (chunk_direct)
// whether it passes the chunk's own byte runs in its buffers (direct: no pack, no unpack) or one
// run of its staging slot; the message's bytes are the same either way, so the two sides never
// need to agree on it. Other pairs send plain messages, direct only for a chunk that is one
// contiguous run. The decision reads only the layouts and the plan, never the data, so the dry
// run and the real run decide alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "exec/chunking.h"
#include "exec/piece_geometry.h"
#include "plan/plan.h"

namespace dynatrain::exec {

class DirectRuns {
 public:
  // `plan` is the plan the chunks were cut from; `src` / `dst` the rank's buffers (addresses
  // are read only when a message is posted, so they may still be filled in after construction).
  DirectRuns(const PieceGeometry& geometry, const plan::RankPlan& plan, comm::Transport& transport, bool runs_enabled,
             const std::vector<std::byte*>& src, const std::vector<std::byte*>& dst)
      : g_(geometry), plan_(plan), t_(transport), enabled_(runs_enabled), src_(src), dst_(dst) {}

  // The pair moves scattered runs (isend_runs / irecv_runs) for every chunk.
  bool pair_runs(int peer) const { return enabled_ && t_.runs_direct(peer); }
  // The rule: direct when the chunk's runs on this side, adjacent runs of one buffer merged,
  // average at least kMinDirectRunBytes (measured on this machine: a runs-to-runs copy beats
  // pack + copy + unpack from 2 KiB runs on; exec/README.md) or are a single run. Without runs
  // for the pair: only a chunk that is one contiguous run.
  bool chunk_direct(int peer, const Chunk& c, bool source) const;
  // The chunk's runs on this side as one comm::ByteRun list over `base` (the lowest address).
  std::pair<std::byte*, std::vector<comm::ByteRun>> comm_runs(int peer, const Chunk& c, bool source) const;
  // The source address of a chunk that is one contiguous run of one source segment (only the
  // offset matters in a dry run), else nullptr.
  const std::byte* send_direct(int peer, const Chunk& c) const;
  // Element offset into the destination buffer of a chunk that is one contiguous run there, else -1.
  std::int64_t recv_direct_offset(int peer, const Chunk& c) const;
  // The runs one side of a message has in the transport (ScheduleEvent::send_runs): a direct
  // chunk's own runs where the pair moves runs, else one (a staging slot or one run).
  std::uint32_t traced_runs(int peer, const Chunk* c, bool direct, bool source) const;

  static constexpr std::uint64_t kMinDirectRunBytes = 1024;

 private:
  // One byte run of a chunk in one of this rank's buffers (source or destination side).
  struct BufRun {
    std::uint32_t buffer = 0;
    std::uint64_t at = 0, bytes = 0;
  };
  // The chunk's byte runs on this side, in message order, adjacent runs of one buffer merged.
  std::vector<BufRun> chunk_runs(int peer, const Chunk& c, bool source) const;

  const PieceGeometry& g_;
  const plan::RankPlan& plan_;
  comm::Transport& t_;
  bool enabled_;
  const std::vector<std::byte*>& src_;
  const std::vector<std::byte*>& dst_;
};

}  // namespace dynatrain::exec
