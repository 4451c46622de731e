// The state's copy in memory (`train --np N --max-restarts K --redundancy R`): a lost process
// costs no steps.
//
// Open MPI ends every process of a job when one dies (docs/reliability.md), so the state that
// survives a loss must live outside the processes. At every step boundary each rank of the
// layout writes its rank file of the checkpoint format (ckpt/checkpoint.h: master, exp_avg,
// exp_avg_sq, every entry checksummed; copied_kinds) into DIR, a directory in shared memory (tmpfs,
// /dev/shm) that the supervisor made for the job, and rank 0 commits it as DIR's latest with the
// progress (step, data cursor) and the run's identity. When the job fails, the supervisor
// (job/supervisor.h) restarts it from DIR's latest copy when it reads back whole and is newer
// than --save's checkpoint: the step the loss interrupted is trained again, no completed step.
//
// Invariants:
//   * DIR holds at most two step directories, written over in turn (ckpt::recycle_save,
//     ckpt::FileWrite::kOver): a copy writes pages tmpfs already holds, and a process killed
//     while one is written leaves the other, `latest`, whole.
//   * R = 2: every rank r also sends its file to its buddy, rank (r + stride) mod n (stride: the
//     ranks on rank 0's node, so that the buddy is on another node; 1 when all are on one node),
//     which keeps it as ckpt::copy_file_name(r). Rank r's boxes then have two holders, and a load
//     that misses rank r's file (the shared memory of its node gone) reads the buddy's copy.
//     A loss of a rank and its buddy together falls back to --save's checkpoint.
//   * The job's processes are on one node: rank 0 indexes every rank's file (a job over several
//     nodes is refused by memory_copy_problem).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "comm/transport.h"
#include "job/memory_copy_files.h"
#include "train/trainer.h"

namespace dynatrain::job {

// The kinds a copy holds: master, exp_avg, exp_avg_sq. Not the params: every optimizer step
// ends with param = master (rounded to bf16 with --bf16), so a load of the copy rebuilds them
// from master (Trainer::params_from_master, in resume_trainer) to the same bytes, and the copy
// writes 4 of every 16 bytes a parameter holds fewer (1 of 7 with --bf16), more where dp
// replicas hold the params.
const std::vector<vps::StateKind>& copied_kinds();

// $DT_MEMORY_COPY_DIR, or "" when unset.
std::string memory_copy_dir();

// The bytes of every rank's state of `layout` in the kinds a copy holds (headers excluded).
std::uint64_t copied_state_bytes(const vps::Layout& layout);

// Before training, on every rank alike (no communication): why this job cannot keep its copy
// ("" when it can): no copy directory or no running supervisor that owns it (not started by
// `train --np N --max-restarts K`: a copy nobody would remove), or
// processes on more than one node.
std::string memory_copy_problem(int redundancy, const comm::Transport& world);
// The same once the layout is built: "" when the directory's file system has room for two copies
// of `state_bytes` (the bytes of every rank's file) times `redundancy`.
std::string memory_copy_room_problem(int redundancy, std::uint64_t state_bytes);

// What the copies cost this job (rank 0's view: each copy's time includes waiting for the others).
struct MemoryCopyStats {
  int copies = 0;
  // The first two copies write fresh pages (first touch); the later ones write over them.
  double first_seconds[2] = {0, 0};
  double warm_seconds = 0, warm_max_seconds = 0;  // copies after the first two
  std::uint64_t file_bytes = 0;                   // rank files of the last copy, buddy copies excluded (rank 0)
};

// Collective over `world` at the boundary after `step` steps: the copy of the trainer's state
// (with R = 2 its buddy copies too) as DIR's latest, `run` in its trainer state. A copy that
// fails on any rank (a full tmpfs) is abandoned on every rank alike with one line from rank 0:
// `latest` stays the previous copy and training goes on.
void save_memory_copy(const std::string& dir, std::int64_t step, train::Trainer& trainer, comm::Transport& world,
                      const nlohmann::json& run, int redundancy, MemoryCopyStats& stats);

}  // namespace dynatrain::job
