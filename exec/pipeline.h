// The pipeline: one rank walks its round schedule, packing, sending, receiving and unpacking
// with several rounds in flight, and runs each wave's keeps while the wave's first round is on
// the wire.
//
// One pipeline per link class (one in all with one class). Before round k is waited for, every
// class has its next rounds posted, up to depth[c] in flight, in sequence order; rounds are
// waited for in sequence order. With one class and depth 2 (the default on one node) this is
// round k+1 posted before round k is waited for, across pair and wave boundaries. With two
// classes one class runs at most a wave ahead of the round waited for. Invariants:
// - no deadlock: every rank's sequence follows one global order of all rounds
//   (exec/round_schedule.h) and a rank waiting for round k has posted every round up to k.
//   Among all rounds ranks are waiting for, the first in the global order has a partner that is
//   done or waits for a round not before it, so it has posted it too, and it completes;
// - a slot is reused only after its round was waited for, so depth[c] staging slots per
//   direction suffice;
// - a packed source range is consumed right after the pack, a direct one when its send has
//   completed; a received range is touched before it is written (a direct receive when posted);
// - direct sends over runs pairs (no staging) may be posted before their round, up to
//   kSendsAhead of them, per peer in round order and up to that peer's first send that cannot
//   go ahead: the receiver reads chunk after chunk without waiting for the sender to run
//   (TransitionStats::sends_ahead). Posting a send waits for nothing, so the order argument above
//   holds, and no ledger event moves (a direct send touches no memory when posted).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/transport.h"
#include "exec/chunking.h"
#include "exec/direct_runs.h"
#include "exec/keep_plan.h"
#include "exec/memory_ledger.h"
#include "exec/round_schedule.h"

namespace dynatrain::exec {

// What the pipeline walks: the plan the chunks were cut from, the chunks per (wave, peer), the
// rank's round sequence, per wave the keeps (indices into plan.keep) and their remaps.
struct PipelineWork {
  const plan::RankPlan& plan;
  const WaveWork& work;
  const std::vector<Round>& rounds;
  const std::vector<std::vector<std::uint32_t>>& keeps;
  const KeepRemaps& remaps;
  int classes = 1;
  std::array<int, 2> depth{2, 0};
};

// Everything the pipeline acts on; in a dry run (ledger.dry()) no data moves and nothing is
// posted, but every ledger call and trace event happens as in the real run.
struct PipelineContext {
  const PieceGeometry& geometry;
  const DirectRuns& direct;
  MemoryLedger& ledger;
  const Staging& staging;
  comm::Transport& transport;
  StateAllocator& alloc;
  std::vector<std::byte*>& src;
  std::vector<std::byte*>& dst;
  ScheduleTrace* trace = nullptr;
  TransitionStats& stats;
  std::atomic<std::uint64_t>* progress = nullptr;  // TransitionOptions::progress (real run only)
};

// Runs every round and every wave's keeps; sets stats.overlapped_rounds.
void run_pipeline(const PipelineWork& work, const PipelineContext& ctx);

}  // namespace dynatrain::exec
