// The simulator's prediction for the switch run-transition is timing, from rates measured in
// the same run on this machine (issue 9, item 3: the validation of sim/simulator.h).
//
// Collective over `world`: every rank measures, with all ranks at once, its copy rate (memcpy
// of 64 MiB between warm buffers) and its message latency (ping-pong of 8 bytes with rank^1);
// rank 0 also measures its copy rate alone. Rank 0 then traces every process's engine schedule
// (sim/trace.h) and plays it through `this-machine`: the link rate it measures (all pairs
// exchanging 64 MiB at once, the median of five per rank, the mean over ranks) as every
// process's link, the mean copy rate and mean latency over ranks,
// and the cores the processes share (SimOptions::cpu_cores) as measured: N x (mean rate with
// all at once) / (rate alone), between 1 and N (on an idle 2-core machine about 2; on one
// loaded by others nearer N: a process then gains little when the others are idle).
// Where the switch moves scattered runs straight (ScheduleEvent::send_runs), all pairs then
// time a scattered send of runs of the switch's mean run size against a contiguous one of the
// same bytes: the per-run cost (sim::SimOptions::run_seconds).
// Processes sit on nodes as `options.topology` says; between nodes the same measured p2p rate
// is taken (a one-machine run has no other).
#pragma once

#include <array>

#include "comm/transport.h"
#include "exec/engine.h"
#include "plan/planner.h"
#include "sim/cluster.h"
#include "sim/simulator.h"

namespace dynatrain::tools {

struct SwitchPrediction {
  sim::Cluster cluster;  // this-machine as measured
  double cpu_cores = 0;  // cores the processes share, as measured
  double run_bytes = 0;    // mean run of the switch's scattered direct messages (0: none)
  double run_seconds = 0;  // measured cost of one such run (sim::SimOptions::run_seconds)
  sim::SimResult result; // valid on rank 0 only
  double without_runs_seconds = 0;  // the prediction with run_seconds 0 (rank 0 only)
};

SwitchPrediction predict_switch(comm::Transport& world, const plan::Planner& planner,
                                const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                const exec::TransitionOptions& options);

}  // namespace dynatrain::tools
