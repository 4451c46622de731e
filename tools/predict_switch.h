// The simulator's prediction for the switch run-transition is timing, from rates measured in
// the same run on this machine (the validation of sim/simulator.h).
//
// Collective over `world`: every rank measures, with all ranks at once, its copy rate (memcpy
// of 64 MiB between warm buffers) and its message latency (ping-pong of 8 bytes with rank^1);
// rank 0 also measures its copy rate alone. Rank 0 then traces every process's engine schedule
// (sim/trace.h) and plays it through `this-machine`:
//   - every link at the rate at which the simulator plays the switch's plain exchange in the
//     time run-transition measured for it (`plain`: sim::plain_exchange_traces,
//     sim::calibrate_links): the rate this switch's traffic gets here; without a plain
//     exchange, the link probe's rate (all pairs exchanging 64 MiB at once, the median of five
//     per rank, the mean over ranks), which is also reported (probe_link);
//   - the mean copy rate over ranks; as latency, the larger of the mean idle ping-pong and the
//     handshake under load: all pairs alternate a copy of the switch's mean message bytes with
//     an 8-byte exchange, against the copies alone (with more processes than cores a polling
//     waiter gets its core back only when a copier yields it);
//   - the cores the processes share (SimOptions::cpu_cores): N x (mean rate with all at once) /
//     (rate alone), between 1 and min(N, the host's CPUs);
//   - where the switch moves scattered runs straight (ScheduleEvent::send_runs), the per-run
//     cost (SimOptions::run_seconds): all pairs time messages of the switch's typical scattered
//     shape (its mean bytes, each side split into its mean number of runs, so the same side
//     copies) against contiguous ones of the same bytes.
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

// The switch's plain exchange as run-transition measured it (exec::measure_plain_exchange):
// its chunk and the slowest rank's seconds. 0 seconds: not measured (the link probe alone).
struct PlainExchange {
  std::uint64_t chunk = 0;
  double seconds = 0;
};

struct SwitchPrediction {
  sim::Cluster cluster;    // this-machine as measured
  double cpu_cores = 0;    // cores the processes share, as measured
  double run_bytes = 0;    // mean run of the switch's scattered direct messages (0: none)
  double run_seconds = 0;  // measured cost of one such run (sim::SimOptions::run_seconds)
  // The typical scattered direct message the probe copies: mean bytes, mean runs of each side.
  double message_bytes = 0, send_runs = 0, recv_runs = 0;
  sim::SimResult result;            // valid on rank 0 only
  double without_runs_seconds = 0;  // the prediction with run_seconds 0 (rank 0 only)
  // The link probe's rate and the prediction with it and the idle latency (rank 0 only): the
  // model before calibration. With a plain exchange the cluster's link is calibrated on it.
  double probe_link = 0, probe_link_seconds = 0;
  // The idle ping-pong latency and the handshake under load (busy_handoff in the .cc); the
  // cluster's latency is the larger.
  double idle_latency = 0, busy_handoff = 0;
  // The prediction with the idle latency (and the link calibrated with it); rank 0 only.
  double idle_latency_seconds = 0;
};

SwitchPrediction predict_switch(comm::Transport& world, const plan::Planner& planner,
                                const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                const exec::TransitionOptions& options, const PlainExchange& plain = {});

}  // namespace dynatrain::tools
