// Preemption notices in the training loop (job/notice.h).
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "job/fault_injection.h"
#include "job/job_control.h"
#include "job/job_events.h"
#include "job/notice.h"
#include "job/supervisor.h"
#include "job/train_ckpt.h"
#include "job/train_job_run.h"

namespace dynatrain::job {

// At a boundary where every process of the world is in the layout (else at a later one), and
// no switch is being prepared (else after it: commit_pending_sooner), every rank learns the
// processes with notice and schedules a switch into the layout the restart rule picks for the
// processes that stay, vacating the noticed ones: before the next step, prepared behind this
// one, or before this very step when the deadline has no room for a step (notice_lead_steps).
// Every rank computes the same entry from the same agreed list and slowest step.
// Returns false when every process has notice: the state is saved (with --save) and the loop
// ends with s_.notice_exit = 128 + signal.
bool TrainJob::act_on_notices() {
  // A process that joined in this boundary's commit skips it: the others agreed before that
  // commit. Idle processes (outside the layout) meet in no boundary.
  if (!notices_enabled() || s_.step == s_.joined_at || trainer_->config().world_size() != trainer_->world_size())
    return true;
  // A peer stopped here would hold every rank in this all-gather: watched as a step is.
  fault_point("notices", trainer_->world().rank());
  if (s_.slowest_step > 0)
    watchdog_.arm("step " + std::to_string(s_.step) + " (its start: the agreement on notices)",
                  switch_timeout_seconds(0) + 10 * s_.slowest_step);
  const NoticeAgreement agreed = agree_on_notices(trainer_->world(), s_.slowest_step);
  watchdog_.disarm();
  const std::vector<NoticedProcess>& noticed = agreed.noticed;
  if (noticed.empty()) return true;
  if (trainer_->preparing()) {  // acted on after that switch, which may have to come sooner
    commit_pending_sooner(agreed);
    return true;
  }
  for (const auto& n : noticed)
    if (n.rank == trainer_->world().rank()) notice_taken();
  // Processes whose vacate was refused stay in the layout, but they will go too.
  const int stay = trainer_->world_size() - static_cast<int>(noticed.size());
  const bool every_process = stay == agreed.refused;
  const char* sig = notice_signal_name(args_.notice.signal);
  if (s_.leader)
    for (const auto& n : noticed)
      record_notice(n.rank, args_.notice.seconds, detail::concat(sig, " to pid ", n.pid, " before step ", s_.step));
  if (every_process) {
    // This boundary's periodic save (save_if_due) holds the state already; a second save of the
    // same step would be refused.
    const bool saved = save_point(s_.step) && s_.step != s_.joined_at;
    if (!args_.save_dir.empty() && !saved)
      save_trainer(args_.save_dir, s_.step, *trainer_, trainer_->world(), s_.run, true);
    // The job's one line (as the failure path's for a stop signal), on stderr, by the leader;
    // on stdout the notice line and the record a supervisor reads (job/supervisor.h: no restart
    // after it).
    if (s_.leader) std::printf("%s (%s)\n", kEveryProcessNoticed, sig);
    if (s_.leader && s_.progress)
      std::printf("%s\n", progress_line({ProgressRecord::Event::kEveryProcessNoticed, -1, 0, "", sig}).c_str());
    std::fflush(stdout);
    if (s_.leader)
      std::fprintf(stderr, "dynatrain: error: rank 0 of %d: stopped by %s to every process: %s\n",
                   trainer_->world_size(), sig,
                   args_.save_dir.empty() ? "no --save, nothing saved"
                                          : detail::concat("saved checkpoint of step ", s_.step).c_str());
    std::fflush(stderr);
    // The others end only once the leader's lines are out: mpirun ends every process as soon as
    // one exits non-zero, and would cut the leader's lines on a loaded machine.
    trainer_->world().barrier();
    s_.notice_exit = 128 + args_.notice.signal;
    return false;
  }
  const std::int64_t at =
      s_.step + notice_lead_steps(agreed.slowest_step_s, args_.notice.seconds, args_.steps - s_.step);
  const vps::ParallelConfig to = choose_restart_layout(o_, trainer_->config(), stay);
  place_switch(s_.schedule, s_.next, at, to);
  std::string ranks;
  for (const auto& n : noticed) ranks += (ranks.empty() ? "" : ",") + std::to_string(n.rank);
  s_.vacate_at[at] = ranks;
  if (s_.leader)
    std::printf("notice: %s will be gone in %g s (%s): vacating %s into %s before step %lld\n",
                describe_noticed(noticed).c_str(), args_.notice.seconds, sig, noticed.size() == 1 ? "it" : "them",
                to.str().c_str(), static_cast<long long>(at));
  std::fflush(stdout);
  return true;
}

// A notice found while a switch is prepared is acted on at the first boundary after that
// switch commits. When waiting for its step would take more than half the notice's seconds
// (a switch prepared far ahead: --lookahead, or the automatic one), that switch commits at
// this boundary instead; the notice stays untaken, so the next boundary acts on it. Every rank
// decides alike (the same agreement and schedule).
void TrainJob::commit_pending_sooner(const NoticeAgreement& agreed) {
  auto& [at, config] = s_.schedule[s_.next];
  const double wait_s = static_cast<double>(at - s_.step) * agreed.slowest_step_s;
  if (at == s_.step || wait_s <= args_.notice.seconds / 2) return;
  if (s_.leader)
    std::printf(
        "notice: %s has notice while the switch to %s planned before step %lld is prepared: committing "
        "it now, before step %lld (%.0f s of steps away), and acting on the notice after it\n",
        describe_noticed(agreed.noticed).c_str(), config.str().c_str(), static_cast<long long>(at),
        static_cast<long long>(s_.step), wait_s);
  std::fflush(stdout);
  if (auto vacate = s_.vacate_at.extract(at)) {
    vacate.key() = s_.step;
    s_.vacate_at.insert(std::move(vacate));
  }
  control_.switch_moved(at, s_.step);
  at = s_.step;
}

// A process outside the layout takes part in no agreement on notices: its notice is refused
// at once (job/notice.h: set_outside_layout).
void TrainJob::note_layout_for_notices() const {
  const vps::ParallelConfig& c = trainer_->config();
  set_outside_layout(trainer_->active() ? ""
                                        : detail::concat("holds no rank of ", c.str(), " (", c.world_size(), " of the ",
                                                         trainer_->world_size(), " processes hold ranks)"));
}

}  // namespace dynatrain::job
