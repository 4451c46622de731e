// `dynatrain run-transition`: the library side of the CLI command (tools/ only parses flags).
//
//   mpirun -np N dynatrain run-transition --model M --from CFG --to CFG [--mem-budget B]
//          [--verify] [--repeat K] [--json FILE] [--no-prefault] [--no-align-pages]
//          [--at-step-boundary] [--fanout off|auto|on] [--fanout-cluster SPEC]
//
// Every rank: builds both layouts, plans its own part (Planner::plan_rank), allocates its
// source state from a PoolAllocator and fills it with the content oracle (testing/fill.h),
// measures point-to-point bandwidth (all pairs rank <-> rank^1 at once, both directions, the
// same load shape as one XOR step), unless --no-prefault touches the memory the switch will take
// beyond its source (sized by a dry run), switches K times (the first switch is "cold"; between two
// forward switches the state is switched back, so switches 2..K are "warm": pool memory and
// staging already touched), verifies (--verify), and rank 0 prints and writes the figures.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "exec/engine.h"
#include "vps/layout.h"

namespace dynatrain::tools {

struct RunTransitionArgs {
  std::string model;                        // preset name or path to a HF config.json
  std::string from, to;                     // config strings, e.g. "tp=2,dp=2" -> "tp=4"
  std::uint64_t mem_budget = 256ull << 20;  // --mem-budget (parse with parse_bytes)
  bool verify = false;                      // --verify
  int repeat = 1;                           // --repeat K >= 1: forward switches timed
  std::string json;                         // --json FILE; empty: none
  std::int64_t bucket_elems = 0;            // --bucket-elems; 0: vps::LayoutOptions default
  std::string kinds = "all";                // --kinds (vps::parse_state_kinds)
  int gpus_per_node = 8;                    // --gpus-per-node (planner source choice)
  std::string placement = "fixed";          // --placement fixed|auto|list (plan/placement.h)
  bool at_step_boundary = false;            // --at-step-boundary: grads zeroed, not moved
  bool align_pages = true;                  // tensors start on page boundaries (vps::kPageAlignElems),
                                            // so kept runs can be remapped; --no-align-pages: packed
  bool prefault = true;                     // touch the memory the cold switch will take fresh
                                            // before it, timed apart (prepare_seconds); --no-prefault
  bool huge_pages = true;                   // the pool's HugePages::kAuto; --no-huge-pages: kOff
  bool direct_runs = true;                  // --no-direct-runs: pack / unpack every chunk that
                                            // is not one contiguous run (exec: direct_runs)
  std::string overlap_links = "auto";       // --overlap-links auto|on|off (exec::LinkOverlap)
  int rounds_in_flight = 0;                 // --rounds-in-flight N per link class (0: auto)
  std::string keep_path = "auto";           // --keep-path auto|remap|copy (exec::KeepPath)
  std::string fanout = "off";               // --fanout off|auto|on: node-level fan-out (plan/fanout.h)
  std::string fanout_cluster;               // --fanout-cluster SPEC: rates for auto (sim/cluster.h);
                                            // empty: plan::FanoutCosts' defaults
};

// Runs the command on every rank of `world` (collective). Returns the exit code, equal on every
// rank: 0 ok, 1 verification failed. Throws InputError for bad arguments (before any
// communication when the arguments themselves are wrong; every rank throws the same error),
// CommError when the transport fails. Prints (rank 0 only) to `out`.
int run_transition_command(const RunTransitionArgs& args, comm::Transport& world, std::FILE* out = stdout);

}  // namespace dynatrain::tools
