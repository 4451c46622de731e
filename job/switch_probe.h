// The training job's benchmark probe of a switch (train::SwitchProbe), run by the trainer right
// after each commit, outside the pause, when `dynatrain train --json` asks for the figures:
//   link      every rank that sent to the busiest receiver in the switch sends it 64 MiB at once
//             (after a warm-up round), the rest of the transition world idle: bytes/s there
//             (SwitchStats::link_bytes_per_s), and whether those senders are of the same launch
//             as the receiver ("same job"), of others ("between jobs") or both ("mixed");
//   exchange  the switch's own traffic (this rank's bytes to and from every peer, in the
//             engine's chunks, in its pair order) as bare messages between warm buffers, the
//             faster of two (exec::measure_plain_exchange, run-transition's "plain
//             exchange"): SwitchStats::exchange_s, and the training thread's CPU in one of them.
// Both are collective over the transition world and change no training state.
#pragma once

#include "train/trainer.h"

namespace dynatrain::job {

class BenchmarkSwitchProbe final : public train::SwitchProbe {
 public:
  void measure(comm::Transport& transition_world, const train::SwitchTraffic& traffic,
               train::SwitchStats& stats) override;
};

}  // namespace dynatrain::job
