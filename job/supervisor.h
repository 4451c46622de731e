// `dynatrain train --np N [--hostfile F | --host H,...] [--max-restarts K] ...`: the one way to
// start a job. This process stays outside the MPI job and starts it (`mpirun -np N dynatrain
// train ...`), setting for that mpirun what Open MPI needs for processes that leave and join
// (unless already set): OMPI_MCA_orte_allowed_exit_without_sync=1 (a shrink's processes exit
// without waiting for the rest), PMIX_MCA_gds=hash (spawned processes that never hang in
// PMIx_Init), OMPI_MCA_orte_execute_quiet=1 (no banners after the one-line errors),
// OMPI_MCA_rmaps_base_oversubscribe=1 when the most processes the schedule asks for (or N)
// exceed this machine's cores, or with --job (a request may grow it), and no hosts are given, `-x DT_PROGRESS_RECORDS`
// (the progress records reach rank 0 on any host) and `--allow-run-as-root` when run as root. No script has to be sourced.
//
// With --max-restarts K the job survives a lost process: Open MPI ends every rank of a job
// when one of them dies, so nothing inside the job can outlive the loss. When the job fails for
// any reason other than bad input (exit 2), the supervisor restarts it, at most K times:
//   * on one process fewer than the job had when it failed (a grown job counts its grown
//     processes; the lost one's slot is taken to be gone, as for a failed GPU or node), in the
//     layout choose_restart_layout picks for that count;
//   * from the save directory's last intact checkpoint of this run (`--resume DIR`), or from the
//     start when the job died before its first checkpoint. Steps done after that checkpoint are
//     lost and trained again: at most --save-every. A checkpoint that does not read back whole
//     (a damaged rank file, found by reading every byte against its checksums) is passed over:
//     `latest` is pointed back at the newest older one that does (one line), and the job
//     restarts from it on as many processes as before, also after an exit 2 (the damaged file's
//     refusal). A checkpoint of another run (job/train_ckpt.h, run_identity) is never resumed.
//   * after a restart the job stays in that layout (the schedule's later switches were planned
//     for the processes it had).
// The CSV (--csv) is assembled from the attempts: every step once, from the attempt that kept
// it, with two more columns: `restart` (the attempt's number on its first row, else empty) and
// `steps_lost` (steps trained by the failed attempt after its last checkpoint). Rank 0's stdout
// passes through, less the progress records (job/progress_record.h) the supervisor learns each
// attempt's last step, processes and layout from; the supervisor adds one line per restart. SIGINT / SIGTERM to the supervisor
// go to mpirun and end the job without a restart.
#pragma once

#include <string>
#include <vector>

#include "job/train_job.h"
#include "train/trainer.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

struct SuperviseSettings {
  int max_restarts = 0;           // --max-restarts K (0: start the job once)
  int np = 0;                     // --np N: processes of the first attempt
  std::string mpirun = "mpirun";  // --mpirun: the launcher (its path or name)
  std::string hostfile;           // --hostfile: passed to mpirun (and to grows)
  std::string hosts;              // --host: passed to mpirun (and to grows)
  std::vector<std::string> argv;  // the train command line to pass on (without supervisor flags)
};

// The layout a job restarted on at most `processes` processes runs in: of the layouts the
// trainer supports for these options (zero and ep kept where they fit, cp = etp = 1):
// the most processes, then the same tp as `previous`, then the same pp, then the same ep, then
// the most dp. Throws InputError when not even one process can run the model.
vps::ParallelConfig choose_restart_layout(const train::TrainerOptions& options, const vps::ParallelConfig& previous,
                                          int processes);

// The supervisor loop; returns the exit code of the command (0 when the job finished).
int supervise(const TrainArgs& args, const SuperviseSettings& settings);

// The command line of this process after `train`, minus the supervisor's own flags
// (--max-restarts, --np, --mpirun), from /proc/self/cmdline.
std::vector<std::string> train_argv_for_job();

}  // namespace dynatrain::job
