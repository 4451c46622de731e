// `dynatrain train`: the library entry point of the CLI (no torch in this header).
//
//   mpirun -np N dynatrain train --model tiny-dense|tiny-moe|config.json [--data FILE]
//       --steps S --global-batch B --seq L --schedule "0:tp=2,pp=2,dp=2;50:tp=1,pp=2,dp=4"
//       [--static] [--csv FILE]
//
// Every rank of `world` calls train_command with the same arguments. Rank 0 prints one line per
// step (loss, tokens/s, layout) and one per switch (plan / transfer / rebuild times); when
// stdout is a terminal the step lines become a single progress line. Ranks that the current
// layout does not use wait (polling, without spinning in MPI) and rejoin at the next switch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "vps/parallel_config.h"

namespace dynatrain::tools {

struct TrainArgs {
  std::string model = "tiny-dense";  // --model: preset name or a Hugging Face config.json
  std::string data;                  // --data: text file (bytes are tokens); empty = embedded text
  std::int64_t steps = 100;          // --steps
  std::int64_t global_batch = 16;    // --global-batch: sequences per step (all dp ranks)
  std::int64_t seq = 64;             // --seq: tokens per sequence
  // --schedule: "STEP:CONFIG;STEP:CONFIG;..." with strictly increasing steps, the first 0;
  // CONFIG is a vps config string (tp, pp, dp, ep, zero; cp=1, etp=1, zero<=1 here).
  std::string schedule = "0:tp=1,pp=1,dp=1";
  bool static_layout = false;        // --static: run the schedule's first layout throughout
  std::string csv;                   // --csv: per-step CSV (header: step,loss,tokens_per_s,...)
  // Optional knobs (flags suggested: --lr, --seed, --micro-batches, --switch-method, --threads).
  double lr = 3e-3;
  std::uint64_t seed = 1234;
  int micro_batches = 0;             // 0: auto
  std::string switch_method;         // "engine" | "gather" | "" (engine when built)
  int threads = 0;                   // torch intra-op threads per rank; 0: cores / local ranks
  // Checkpoints (tools/train_ckpt.h): --save DIR every --save-every steps and after the last
  // step; --resume DIR continues from DIR's latest checkpoint in the schedule's layout
  // for that step, with any number of processes.
  std::string save_dir;
  std::int64_t save_every = 0;
  std::string resume_dir;
};

// Parses a --schedule string; throws InputError naming the bad entry.
std::vector<std::pair<std::int64_t, vps::ParallelConfig>> parse_schedule(const std::string& text);

// Runs the training job. Returns 0 on success. Throws InputError (bad model, schedule, sizes;
// raised identically on every rank before any communication) or CommError.
int train_command(const TrainArgs& args, comm::Transport& world);

}  // namespace dynatrain::tools
