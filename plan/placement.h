// Placement: which process takes which rank of a layout.
//
// A job runs on `processes` processes, numbered like MPI ranks; process p sits on node
// p / gpus_per_node (plan::Topology). A layout of W ranks is placed by an injective map
// rank -> process into [0, processes). Processes that no rank maps to hold nothing in that
// layout: before a switch they are the joining ones, after it the leaving (or idle) ones.
//
// The plan speaks in processes: RankPlan::rank, Piece::src_rank and Piece::dst_rank are
// processes, while a piece's buffer and segment ids refer to the RankLayout of the layout rank
// that process takes (Planner::src_rank_of / dst_rank_of). With the identity placement on both
// sides (the default) processes and ranks coincide, as before placement existed.
//
// (Not to be confused with where a region sits inside a rank's buffers: that is vps::Segment.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/stats.h"
#include "vps/layout.h"

namespace dynatrain::plan {

class Placement {
 public:
  Placement() = default;  // identity: rank r on process r
  // process_of_rank[r] = the process that takes rank r. A map equal to the identity is stored
  // as the identity. Injectivity and range are checked by validate().
  explicit Placement(std::vector<int> process_of_rank);
  // "fixed" (identity) or a comma-separated list of processes, one per rank ("2,3,0,1").
  // Throws InputError naming the bad token.
  static Placement parse(const std::string& text);

  bool is_identity() const { return process_of_.empty(); }
  int process_of(int rank) const { return process_of_.empty() ? rank : process_of_[rank]; }
  // The rank of a `ranks`-rank layout that `process` takes, or -1 when it takes none.
  int rank_of(int process, int ranks) const;
  // Throws InputError unless the map has `ranks` entries, each in [0, processes), all distinct.
  void validate(int ranks, int processes) const;
  // The process of every rank of a `ranks`-rank layout (the identity spelled out).
  std::vector<int> processes_of(int ranks) const;
  // "fixed" for the identity, else the comma-separated list parse() reads.
  std::string str() const;
  // One more than the highest process the map names (0 for the identity): a placement onto
  // processes beyond both layouts (new processes, while others are vacated) widens the plan.
  int processes() const { return static_cast<int>(rank_of_.size()); }
  // Ranks of a `ranks`-rank layout that sit on another process than under the identity.
  int moved_ranks(int ranks) const;

  friend bool operator==(const Placement& a, const Placement& b) { return a.process_of_ == b.process_of_; }

 private:
  std::vector<int> process_of_;  // empty: identity
  std::vector<int> rank_of_;     // inverse of process_of_, -1 where no rank
};

// The placements of both sides of a switch. The source side is given by the running job (which
// process holds which source rank); the destination side is the choice.
struct SwitchPlacement {
  Placement src, dst;
  // Processes of the source side that are gone (a lost process, its memory with it): they hold
  // nothing, so every piece comes from a live holder; Planner::unheld() names the boxes none
  // holds (planning them is then refused). Each in [0, the planner's processes); any order.
  std::vector<int> lost = {};
  // Copies of source ranks' state kept by other processes (redundancy, docs/reliability.md):
  // source rank `rank`'s buffers, all of them, also held by `process`, numbered there after its
  // own rank's buffers, in the order of this list (Planner::src_rank_layout). A copy is a holder
  // only while its rank's process is lost (and its own process is not); the rest are planned as
  // buffers nothing reads. `absent_kinds` (bit k = StateKind k): kinds whose buffers the copy
  // does not keep (their ids stay, no memory behind them). Kinds planned together (the same
  // element size and sharding, one plan for all) are no source where every one of them is
  // absent; where only some are, the absent ones must be kinds the switch zeroes.
  struct Copy {
    int rank = 0, process = 0;
    std::uint32_t absent_kinds = 0;
  };
  std::vector<Copy> copies = {};
};

// The destination placement `--placement auto` picks: each destination rank goes to the process
// that minimises the estimated time to bring it its state, bytes it lacks on its node over the
// inter-node bandwidth plus bytes it lacks itself but its node holds over the intra-node one;
// minimised over all ranks together (a linear assignment, solved exactly by the Hungarian
// method in O(W^3)). A rank's dp (and cp) index is part of its rank, so this also chooses which
// ZeRO shard each process owns. Equal costs prefer the identity. Deterministic: every process
// computes the same placement from the same inputs.
// `eligible`: the processes that may take a rank (empty: every process of the job), for when
// the leaving processes are not the placement's choice (a node is being drained); InputError
// when fewer than the destination's ranks.
// `rank0_on_process0`: rank 0 is taken by process 0 (the trainer's rank 0 runs the job's I/O),
// and the other ranks are placed at the least cost around it; InputError if process 0 is not
// eligible.
Placement auto_placement(const vps::Layout& src, const vps::Layout& dst, const Topology& topology,
                         const Placement& src_placement = {}, const Bandwidth& bandwidth = {},
                         const std::vector<int>& eligible = {}, bool rank0_on_process0 = false);

// The placement of a `ranks`-rank layout onto `processes` processes when the processes in
// `vacate` must take no rank (a vacate request): rank r stays on process r unless that process
// is vacated or missing; the other ranks take the remaining processes in order (processes
// started for the switch, numbered last, included). process_of_rank of the result; needs
// processes - vacate.size() >= ranks and vacate within [0, processes) (InvariantError otherwise).
std::vector<int> place_around(int ranks, int processes, const std::vector<int>& vacate);

struct Affinity;  // plan/planner.h

// The fewest bytes any destination placement onto `eligible` processes (empty: all) can send
// across nodes, computed from the affinity alone, without the assignment solver: a lower bound
// that makes auto's optimality checkable. Every rank sits on the eligible node holding most of
// its state, with no limit on ranks per node; but when the nodes holding source state have
// fewer eligible processes than there are ranks, the excess ranks land on nodes holding none,
// and the bound charges it to the ranks with the least on their best node. Exact where source
// boxes do not overlap (Affinity); auto_placement reaches it whenever no node is wanted by more
// ranks than it has processes.
std::uint64_t inter_node_floor(const Affinity& affinity, const Topology& topology,
                               const std::vector<int>& eligible = {});

// Solves the assignment problem: rows (ranks) <= columns (processes), cost[row * cols + col];
// returns the column of every row, minimising the total. Exposed for tests.
std::vector<int> min_cost_assignment(int rows, int cols, const std::vector<std::int64_t>& cost);

}  // namespace dynatrain::plan
