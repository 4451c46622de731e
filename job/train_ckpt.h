// Checkpoint glue for `dynatrain train`: --save DIR / --save-every N / --resume DIR.
// The trainer's state arenas go to ckpt/ as they are (param, master, exp_avg, exp_avg_sq; grads
// are zero at a step boundary and not saved); the progress (steps done, data cursor) goes in
// the index's trainer state.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/checkpoint.h"
#include "comm/transport.h"
#include "train/trainer.h"

namespace dynatrain::job {

// Collective over `world` at the boundary after `step` steps: saves the trainer's state as
// checkpoint `step` of `dir`. Rank 0 prints one line with the time.
void save_trainer(const std::string& dir, std::int64_t step, train::Trainer& trainer, comm::Transport& world);

// Every rank: fills its arenas of the trainer's current layout from `ckpt` and restores the
// progress. Rank 0 prints one line with the time and bytes (max over ranks).
void resume_trainer(const ckpt::Checkpoint& ckpt, train::Trainer& trainer, comm::Transport& world);

}  // namespace dynatrain::job
