// The exec test core: one body per transition, written once against `Transport&` and run by
// every rank. Bootstraps (style.md item 8):
//   engine_inproc_test.cc  ranks as threads (comm::run_ranks), several rank counts, under gtest
//   engine_mpi_test.cc     ranks as processes under `mpirun -np N` (N = 2, 3, 4, 6, 8)
//   engine_c10d_test.cc    ranks as threads over c10d Gloo groups
//   engine_nccl_test.cc    device state over NCCL (where CUDA and NCCL are found)
// A body fills the source state with the content oracle (testing/fill.h), switches, and checks
// every destination element, the byte and message accounting, and the memory bound. A failed
// check throws CaseFailure naming the rank and the case; no gtest assertion runs inside.
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "common/error.h"
#include "exec/engine.h"
#include "exec/pool_allocator.h"
#include "vps/model_spec.h"

namespace dynatrain::exec::cases {

class CaseFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Inside a case body (with `t`, the Transport, and `c`, the TransitionCase, in scope): throws
// CaseFailure naming the file, line, rank and case when `cond` is false.
#define CASE_REQUIRE(cond, ...)                                                                                    \
  do {                                                                                                             \
    if (!(cond))                                                                                                   \
      throw ::dynatrain::exec::cases::CaseFailure(                                                                 \
          ::dynatrain::detail::concat(__FILE__, ":", __LINE__, ": rank ", t.rank(), "/", t.size(), ": ", c.name(), \
                                      ": ", #cond, " " __VA_OPT__(, ) __VA_ARGS__));                               \
  } while (0)

struct TransitionCase {
  std::string kind;   // tp, pp, dp, ep, zero, grow, shrink, hybrid, fixed
  std::string model;  // tiny-dense or tiny-moe
  std::string from, to;
  std::int64_t bucket_elems = 700;  // small: many ZeRO buckets per kind
  std::size_t budget = 512 << 10;   // >= 8x the largest buffer (64 KiB), see exec/README.md
  WaveOrder order = WaveOrder::kAuto;
  int world = 0;                   // ranks the switch needs: max of both configs' world sizes
  std::uint32_t zeroed_kinds = 0;  // TransitionOptions::zeroed_kinds (at a step boundary: grads)
  // TransitionOptions::fill_zeroed. false: run_case zeroes the zeroed kinds' destination buffers
  // itself before it verifies every byte (as the caller must), first counting into `unset_left`
  // (if set) their bytes that were not zero (left as the engine found them).
  bool fill_zeroed = true;
  std::uint64_t* unset_left = nullptr;
  bool align_pages = false;  // LayoutOptions::align_elems = kPageAlignElems: remapped keeps
  bool direct_runs = true;   // TransitionOptions::direct_runs: scattered runs moved unpacked
  bool commit_ahead = true;  // TransitionOptions::commit_ahead
  // > 0: ranks sit on nodes of this many (TransitionOptions::topology) and the switch runs one
  // pipeline per link class (LinkOverlap::kOn; two classes when the ranks span two nodes).
  int gpus_per_node = 0;
  int rounds_in_flight = 0;  // TransitionOptions::rounds_in_flight (0: the engine's default)
  // TransitionOptions::keep_path. The cases remap wherever they can, whatever this machine's
  // measured rates, so the remap path is exercised everywhere; keep_path_case covers the others.
  KeepPath keep_path = KeepPath::kRemap;
  // The pool's huge pages (the product's default kAuto: on where the kernel's THP mode allows).
  HugePages huge_pages = HugePages::kAuto;
  // TransitionOptions::progress; run_case checks that it rose by every byte sent, received and
  // kept by a copy or a remap.
  std::atomic<std::uint64_t>* progress = nullptr;
  std::string name() const;
};
inline void PrintTo(const TransitionCase& c, std::ostream* os) { *os << c.name(); }

// Deterministic (seeded by `ranks`) random transitions that need at most `ranks` ranks and at
// least one with exactly `ranks`: `per_kind` of each of tp, pp, dp, ep, zero, grow, shrink,
// hybrid where such a pair exists, plus a few fixed ones.
std::vector<TransitionCase> transition_cases(int ranks, int per_kind = 1);

// The same switches on "mid-dense" / "mid-moe" (tiny-* with hidden 256, vocab 2048: 4M
// parameters) with Megatron's 40M-element buckets, so that every buffer (2-16 MiB) is larger
// than a small `budget`: the page-wise path (exec/README.md) is what keeps the peak bounded.
// Every other case lays tensors out page-aligned, so kept tensors at new offsets are remapped;
// every third runs without direct runs (only contiguous chunks unpacked, the plain path).
std::vector<TransitionCase> large_buffer_cases(int ranks, std::size_t budget);
// transition_cases(ranks, 1) and the first three large_buffer_cases(ranks, 4 MiB) with the
// ranks on nodes of two: two link classes, each with its own pipeline (exec/README.md).
std::vector<TransitionCase> two_class_cases(int ranks);

// A model name of the cases: mid-dense, mid-moe, or anything vps::model_from_name accepts.
vps::ModelSpec case_model(const std::string& name);

// Runs one case on every rank of `t` (t.size() >= c.world). Throws CaseFailure on a failure.
TransitionStats run_case(const TransitionCase& c, comm::Transport& t);

// tiny-dense tp=4,zero=0 -> dp=4,zero=0 on exactly 4 ranks: every rank needs 3/4 of each
// tp-split tensor from its 3 peers. With a budget that holds everything each rank sends exactly
// 3 messages (one per peer) and, with a budget 64x smaller, as many as its chunks.
void message_count_case(comm::Transport& t);

// Sends posted ahead of their rounds, on exactly 4 ranks: a lend (tp=2,dp=2,zero=1 ->
// tp=2,dp=1,zero=1 at a step boundary) whose senders, ranks 2 and 3, send every chunk direct:
// over a runs pair all but the first rounds' sends go ahead, without runs none; every byte
// verified.
void sends_ahead_case(comm::Transport& t);
void commit_ahead_case(comm::Transport& t);

// Zero-copy keeps on exactly 4 ranks: kept buffers that stay identical are handed over.
void zero_copy_keep_case(comm::Transport& t);

// Remapped keeps on exactly 4 ranks, page-aligned layouts, Megatron-sized buckets, 8 MiB budget:
// a PP and a DP switch keep >= 80 % of their kept bytes without a copy (handed over or moved
// by remapping pages at a new offset), every destination byte verified, the peak asserted.
void remapped_keep_case(comm::Transport& t);

// The keep path honoured, on exactly 4 ranks (the remapped_keep_case PP switch): forced copy
// remaps nothing, forced remap remaps, the measured choice (kAuto) remaps only runs of at least
// its break-even and says so; every destination byte verified on each, so both paths give the
// identical bytes. The last run also counts its progress (TransitionOptions::progress).
void keep_path_case(comm::Transport& t);

// Strided direct transfers: mid-dense tp=2,zero=0 -> dp=2,zero=0 on 2 ranks at 4 MiB and 64 MiB
// budgets, each with direct runs on and off, every destination byte verified and the peak
// asserted (run_case). A rank's TP shard is contiguous in its source buffer, so with direct
// runs every chunk is sent unpacked (without, only chunks of one piece); received, the row-parallel slices are strided: 512-byte runs (attention out,
// below the 1 KiB rule) are unpacked from staging at 4 MiB, where a chunk holds one slice, and
// 1408-byte runs (fc2) land straight in place when the pair has runs_direct (at 64 MiB a chunk's
// runs average above the rule: all of it). Without direct runs, only contiguous chunks do.
void strided_direct_case(comm::Transport& t);

// Two link classes on exactly 4 ranks, two per node (TransitionOptions::topology, LinkOverlap
// kOn): tiny-dense tp=4,zero=0 -> dp=4,zero=0, where every rank receives from its same-node
// peer and from both peers of the other node, at a budget that cuts each pair into several
// rounds. Every destination byte verified and the peak asserted (run_case); with kOn every
// rank finishes rounds while a round of the other class is in flight, each class has its own
// staging, and the bytes equal a run with one pipeline (nothing overlapped), which is also run
// with a deeper pipeline (5 rounds in flight).
void link_overlap_case(comm::Transport& t);

// Absent sources on exactly 4 ranks: tiny-dense dp=4,zero=1 -> dp=2,zero=1 where processes 0 and
// 1 also hold copies of ranks 2 and 3 (plan::SwitchPlacement::copies; those ranks are alive, so
// the plan reads nothing of the copies): the copies' buffers are passed as nullptr and every
// destination byte arrives. A source the plan reads (each rank's first exp_avg shard) passed as
// nullptr is refused on every rank, naming the buffer, before anything moves.
void absent_source_case(comm::Transport& t);

}  // namespace dynatrain::exec::cases
