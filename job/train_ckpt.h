// Checkpoint glue for `dynatrain train`: --save DIR / --save-every N / --resume DIR.
// The trainer's state arenas go to ckpt/ as they are (param, master, exp_avg, exp_avg_sq; grads
// are zero at a step boundary and not saved); the progress (steps done, data cursor) and the
// run's identity go in the index's trainer state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/checkpoint.h"
#include "comm/transport.h"
#include "job/train_job.h"
#include "train/trainer.h"

namespace dynatrain::job {

// The trainer's state as ckpt/ sees it: one pool block per buffer (train/state.h).
ckpt::Arenas view(train::Arenas& arenas);
// The kinds a checkpoint holds: param, master, exp_avg, exp_avg_sq (gradients are zero at a
// step boundary).
const std::vector<vps::StateKind>& saved_kinds();
// Whether a resume from a checkpoint of `kinds` rebuilds the params from master (it holds master
// but no params: the memory copy, job/memory_copy.h), so that they need no init before the load.
bool rebuilds_params(const std::vector<vps::StateKind>& kinds);

// The identity of a run, saved in every checkpoint it writes (trainer state "run"), so that a
// --save directory is never taken over by another run and a restart never adopts another run's
// state. Fields, compared in this order:
//   model     "<name> <XXH3-64 of its tensors: names and shapes>"
//   data      XXH3-64 of the training text's bytes (`data_file` beside it names the --data file,
//             or 'embedded'; shown in messages, not compared: the same text elsewhere is the same data)
//   seed, lr  --seed, --lr
//   schedule  XXH3-64 of the schedule as given ("STEP:CONFIG;..."; --static: its first entry).
//             DT_RUN_SCHEDULE replaces the text: the supervisor sets it to the job's schedule,
//             so that its restarts (each in a schedule of one layout) keep the job's identity.
nlohmann::json run_identity(const TrainArgs& args, const vps::ModelSpec& model, const std::string& text);
// The schedule text run_identity hashes for `args` (DT_RUN_SCHEDULE when set).
std::string identity_schedule(const TrainArgs& args);
// "" when `saved` (a checkpoint's "run"; null for checkpoints written before identities) is
// `run`; otherwise the first differing field as "its seed is 7, this run's 1".
std::string identity_difference(const nlohmann::json& run, const nlohmann::json& saved);

// Why --save DIR cannot take this run before it trains ("" when it can; no --save: ""):
//  * DIR cannot be created or written (a probe file is created and removed in it);
//  * unless --resume names DIR: DIR already holds a checkpoint, of another run (naming the
//    first differing field) or of this one; both ways `--resume DIR` continues it.
// Reads DIR only on the calling process (rank 0, or the supervisor before it starts the job).
std::string save_dir_problem(const TrainArgs& args, const nlohmann::json& run, const vps::ModelSpec& model);

// The trainer state a checkpoint of `step` carries in its index (resume_trainer reads it back):
// the progress (step, data cursor) and the run's identity.
nlohmann::json saved_progress(train::Trainer& trainer, std::int64_t step, const nlohmann::json& run);

// Collective over `world` at the boundary after `step` steps: saves the trainer's state as
// checkpoint `step` of `dir`, with `run` (run_identity) in its trainer state. Rank 0 prints one
// line with the time. A periodic save (final == false) that fails on any rank (a full disk, a
// failing write) is abandoned on every rank alike: rank 0 removes what it wrote and prints one
// line, the previous checkpoint and `latest` stay as they were, and training goes on (the next
// save is tried). The final save's failure throws (InputError on every rank).
void save_trainer(const std::string& dir, std::int64_t step, train::Trainer& trainer, comm::Transport& world,
                  const nlohmann::json& run, bool final);

// Every rank: fills its arenas of the trainer's current layout from `ckpt` and restores the
// progress. Rank 0 prints one line with the time and bytes (max over ranks).
void resume_trainer(const ckpt::Checkpoint& ckpt, train::Trainer& trainer, comm::Transport& world);

}  // namespace dynatrain::job
