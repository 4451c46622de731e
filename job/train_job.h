// `dynatrain train`: the library entry point of the CLI (no torch in this header).
//
//   mpirun -np N dynatrain train --model tiny-dense|tiny-moe|config.json [--data FILE]
//       --steps S --global-batch B --seq L --schedule "0:tp=2,pp=2,dp=2;50:tp=1,pp=2,dp=4"
//       [--static] [--csv FILE] [--json FILE] [--lookahead K] [--placement fixed|auto] [--hostfile F] [--host H]
//
// Every rank of `world` calls train_command with the same arguments. Rank 0 prints one line per
// step (loss, tokens/s, layout, a switch being prepared) and one per switch (pause, prepare,
// hidden share, transfer); on a terminal the step lines start with a progress bar.
//
// Elastic: each switch is prepared `lookahead` steps ahead on the elastic device manager's
// thread (edm/). A layout with more ranks than the job starts the missing processes (the
// launcher: MPI_Comm_spawn of this program with these arguments; the new processes enter
// train_command too, see Launcher::join, and continue from the switch); ranks the new layout
// does not use leave the job in the commit (Launcher::leave, exit status 0). A switch whose
// processes cannot start is refused with one line and training goes on in the old layout.
#pragma once

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "edm/launcher.h"
#include "job/lost_peer.h"
#include "job/notice.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

struct TrainArgs {
  std::string model = "tiny-dense";  // --model: preset name or a Hugging Face config.json
  std::string data;                  // --data: text file (bytes are tokens); empty = embedded text
  std::int64_t steps = 100;          // --steps
  // --global-batch: sequences per step (all dp ranks); 24 divides evenly over dp = 1, 2, 3, 4, 6, 8
  std::int64_t global_batch = 24;
  std::int64_t seq = 64;  // --seq: tokens per sequence
  // --schedule: "STEP:CONFIG;STEP:CONFIG;..." with strictly increasing steps, the first 0;
  // CONFIG is a vps config string (tp, pp, dp, cp, ep, etp, zero; limits: docs/train.md).
  std::string schedule = "0:tp=1,pp=1,dp=1";
  bool static_layout = false;      // --static: run the schedule's first layout throughout
  std::string csv;                 // --csv: per-step CSV (header: step,loss,tokens_per_s,...)
  std::string json;                // --json: one record per switch (docs/edm.md)
  int lookahead = 0;               // --lookahead: steps between prepare and commit; 0 = auto
  std::string placement = "auto";  // --placement: fixed | auto (which process takes which rank)
  std::string job;                 // --job DIR: take switch requests from DIR (job/job_request.h)
  bool align_pages = true;         // TrainerOptions::align_pages; --no-align-pages: packed
  bool bf16 = false;               // --bf16: TrainerOptions::bf16 (bf16 weights, fp32 master)
  // How processes are started and ended (nullptr: the job keeps its processes; layouts must
  // fit the world). `dynatrain train` uses the MPI launcher with --hostfile / --host.
  std::shared_ptr<edm::Launcher> launcher;
  // A lost process recovered in place by the survivors (job/lost_peer.h): set for a job on
  // torch.distributed whose launcher lets the survivors go on; nullptr: a lost process ends it.
  std::shared_ptr<LostPeerSupport> lost_peer;
  // Optional knobs (flags suggested: --lr, --seed, --micro-batches, --switch-method, --threads,
  // --bucket-elems).
  double lr = 3e-3;
  std::uint64_t seed = 1234;
  int micro_batches = 0;                 // 0: auto
  std::string switch_method;             // "engine" | "gather" | "" (engine when built)
  int threads = 0;                       // torch intra-op threads per rank; 0: cores / local ranks
  std::int64_t bucket_elems = 32768;     // --bucket-elems: ZeRO bucket size (TrainerOptions::bucket_elems)
  NoticeSettings notice{SIGTERM, 30.0};  // --notice-signal, --notice-s (job/notice.h)
  // Checkpoints (job/train_ckpt.h): --save DIR every --save-every steps and after the last
  // step; --resume DIR continues from DIR's latest checkpoint in the schedule's layout
  // for that step, with any number of processes.
  std::string save_dir;
  std::int64_t save_every = 0;
  std::string resume_dir;
  // --redundancy R (job/memory_copy.h): 0, or copies of the state kept in shared memory at every
  // step boundary for the supervisor's restart: 1 (this node's), 2 (and a buddy's of each rank).
  int redundancy = 0;
  // --recovery-reserve: with lost processes recovered in place (lost_peer), each process keeps
  // resident the memory a recovery from one more loss would add to it (job/train_job_recover.cc).
  bool recovery_reserve = false;
};

// Parses a --schedule string; throws InputError naming the bad entry.
std::vector<std::pair<std::int64_t, vps::ParallelConfig>> parse_schedule(const std::string& text);

// Runs the training job. Returns 0 on success. Throws InputError (bad model, schedule, sizes;
// raised identically on every rank before any communication) or CommError.
int train_command(const TrainArgs& args, comm::Transport& world);

}  // namespace dynatrain::job
