// The training loop of `dynatrain train` (the class: job/train_job_run.h).
#include "job/train_job.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "common/output_file.h"
#include "job/fault_injection.h"
#include "job/notice.h"
#include "job/train_ckpt.h"
#include "job/train_job_run.h"

namespace dynatrain::job {
using namespace dynatrain::train;  // the trainer this command drives

// parse_schedule: job/schedule.cc (no torch, so the fuzz target can build it).

int train_command(const TrainArgs& args, comm::Transport& world) {
  TrainJob job(args, world);
  return job.run();
}

int TrainJob::run() {
  if (!set_up()) return 0;
  enable_notices(args_.notice);
  note_layout_for_notices();
  for (; s_.step < args_.steps; ++s_.step) {
    if (!boundary_or_recover()) break;
    if (!trainer_->active()) continue;  // wait in the next prepare / commit / finish
    std::optional<StepStats> st = step_or_recover();
    while (!st && trainer_->active() && !s_.ended) st = step_or_recover();  // after a recovery: the step again
    if (s_.ended) break;
    if (st && s_.leader) report_step(*st);
  }
  return finish();
}

// Everything between two steps, in this order on every rank: the periodic checkpoint, the
// preemption notices (a vacating switch scheduled at this step), a prepare that is due, the
// switch committed before this step, then (with --job) the request sync, each followed by any
// prepare it made due. Returns false when the loop must end: this
// process left the job in a commit, or rank 0 ended the run (kJobEnd).
bool TrainJob::boundary() {
  s_.switched.reset();
  save_if_due();
  refresh_remote_copies();
  if (s_.leader) print_step_line();  // the step before it, now that its copy is made
  if (!act_on_notices()) return false;
  maybe_prepare();
  if (!commit_if_due()) return false;
  if (!args_.job.empty()) {
    if (!sync_job()) return false;
    maybe_prepare();
  }
  control_.boundary(s_.step, trainer_->config().str(), trainer_->world_size());
  return true;
}

void TrainJob::save_if_due() {
  // (A boundary done again after a recovery does not save a step whose save completed.)
  const bool save = save_point(s_.step) && s_.step != s_.joined_at && s_.saved != s_.step, copy = copy_point(s_.step);
  if (save || copy) s_.csv.flush();  // a supervisor that restarts from it keeps the rows before it
  if (save) {
    save_trainer(args_.save_dir, s_.step, *trainer_, trainer_->world(), s_.run, false);
    s_.saved = s_.step;
    fault_point("saved", trainer_->world().rank());
  }
  if (!copy) return;
  save_memory_copy(s_.copy_dir, s_.step, *trainer_, trainer_->world(), s_.run, memory_copy_redundancy(), s_.copy_stats);
  fault_point("copied", trainer_->world().rank());
}

bool TrainJob::commit_if_due() {
  if (s_.next >= s_.schedule.size() || s_.schedule[s_.next].first != s_.step) return true;
  fault_point("switch", trainer_->world().rank());
  // A peer that stops answering mid-switch ends the job (job/watchdog.h); a switch that keeps
  // moving bytes (Trainer::switch_progress) is slow, not hung. Ranks the current layout leaves
  // idle wait for the active ones: only active ranks arm.
  if (trainer_->active())
    watchdog_.arm(
        "the switch before step " + std::to_string(s_.step), switch_deadline_,
        [t = trainer_.get()] {
          const int n = t->starting_processes();
          return n == 0 ? std::string()
                        : "waiting for " + std::to_string(n) +
                              " process(es) being started for it (MPI_Comm_spawn) that never joined";
        },
        trainer_->switch_progress());
  const bool stays = commit();
  watchdog_.disarm();
  if (!stays) return false;
  maybe_prepare();
  return true;
}

// Commits the switch being prepared (s_.switched holds its figures). Returns false when this
// process left the job in it.
bool TrainJob::commit() {
  std::string handed;
  if (s_.leader) {  // the leader's state, in case the commit moves rank 0 to another process
    s_.csv.flush();
    s_.ls.schedule = rest_of_schedule();
    s_.ls.control = control_.hand_over();
    handed = s_.ls.serialize();
  }
  const std::vector<int> vacated = vacated_ranks(s_.schedule[s_.next].first);
  const int me = trainer_->world().rank();
  s_.switched = trainer_->commit(std::move(handed));
  // A refused switch changed nothing: this process still has the world rank it was vacated by.
  if (!s_.switched->refused.empty() && std::find(vacated.begin(), vacated.end(), me) != vacated.end()) notice_refused();
  s_.preparing.clear();
  ++s_.next;
  return after_commit(*s_.switched);
}

StepStats TrainJob::train_step() {
  const bool nan_loss = fault_point("step", trainer_->world().rank());  // DT_FAULT=nan:...: test the stop below
  // A peer that stops answering mid-step ends the job too: the deadline is the watchdog's
  // floor plus 10x the slowest step so far (the first step, warm-up included, is not timed).
  if (s_.slowest_step > 0)
    watchdog_.arm("step " + std::to_string(s_.step), switch_timeout_seconds(0) + 10 * s_.slowest_step);
  const StepStats st = trainer_->step();
  watchdog_.disarm();
  // Every active rank has the loss: all stop alike, with the CSV rows before this step kept.
  if (const double loss = nan_loss ? std::nan("") : st.loss; !std::isfinite(loss)) {
    if (s_.csv.is_open()) s_.csv.flush();
    DT_INPUT_ERROR("the loss is ", loss, " at step ", s_.step, ": training diverged; lower --lr (", args_.lr, ")",
                   args_.save_dir.empty() ? "" : " and --resume from the last checkpoint");
  }
  s_.slowest_step = std::max(s_.slowest_step, st.seconds);
  return st;
}

// After the loop: the final checkpoint, the summary, and the way out of the job.
int TrainJob::finish() {
  if (s_.leader) print_step_line();
  if (s_.csv.is_open()) check_written(s_.csv, "CSV", args_.csv);
  end_job();
  if (s_.notice_exit != 0) {  // every process had notice: saved, ending
    control_.end(s_.notice_exit, s_.step);
    // As below: after processes left (a shrink), MPI_Finalize may wait for them until the
    // notice's deadline; this process ends at once instead, with the notice's exit code.
    if (args_.launcher && args_.launcher->cannot_leave().empty()) {
      s_.csv.close();
      s_.json_out.close();
      trainer_.reset();
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(s_.notice_exit);
    }
    return s_.notice_exit;
  }
  if (trainer_->left()) {  // handed its state over in the last commit
    trainer_.reset();
    if (args_.launcher) args_.launcher->leave();
    return 0;
  }
  if (!args_.save_dir.empty())
    save_trainer(args_.save_dir, args_.steps, *trainer_, trainer_->world(), s_.run, true);  // the final state
  trainer_->finish();
  control_.end(0, args_.steps);
  if (s_.leader) print_summary();
  // Where processes may leave a running job, every process ends that way: MPI_Finalize can wait
  // (measured: sometimes for ever) for processes of its job that already left (docs/edm.md).
  // After a failed start the job must end through the launcher whether or not they may.
  const bool start_failed = args_.launcher && args_.launcher->start_failed();
  if (start_failed || (args_.launcher && args_.launcher->cannot_leave().empty())) {
    s_.csv.close();
    s_.json_out.close();
    trainer_.reset();
    if (start_failed) args_.launcher->end_after_failed_start(s_.leader);
    args_.launcher->leave();
  }
  return 0;
}

}  // namespace dynatrain::job
