// TrainJob's schedule as it changes: prepares, requests from `dynatrain request`, and the
// per-step job sync that hands rank 0's schedule to the other ranks (--job DIR).
#include <cstdio>

#include "common/error.h"
#include "job/fault_injection.h"
#include "job/job_request.h"
#include "job/schedule_tail.h"
#include "job/train_job_run.h"

namespace dynatrain::job {
using namespace dynatrain::train;  // the trainer this command drives

void TrainJob::maybe_prepare() {
  if (s_.next >= s_.schedule.size() || trainer_->preparing() ||
      s_.step + trainer_->lookahead() < s_.schedule[s_.next].first)
    return;
  const auto& [at, config] = s_.schedule[s_.next];
  const auto keep = s_.vacate_at.find(at);
  trainer_->prepare(config, rest_of_schedule(), vacated_ranks(at),
                    keep != s_.vacate_at.end() && keep->second == kKeepProcesses);
  fault_point("prepare", trainer_->world().rank());  // fires DELAY_MS into the background prepare
  s_.preparing = config.str();
  control_.switch_prepared(at, trainer_->config().str(), s_.preparing);
}

std::vector<int> TrainJob::vacated_ranks(std::int64_t at) const {
  const auto it = s_.vacate_at.find(at);
  if (it == s_.vacate_at.end() || it->second == kKeepProcesses) return {};
  if (it->second != kVacateAll) return parse_rank_list(it->second);
  std::vector<int> all(static_cast<std::size_t>(trainer_->world_size()));
  for (int r = 0; r < trainer_->world_size(); ++r) all[static_cast<std::size_t>(r)] = r;
  return all;
}

// The schedule from entry `next` on (job/schedule_tail.h): processes started by the switch
// being prepared continue from it, it holds switches requested while running.
std::string TrainJob::rest_of_schedule() const {
  return encode_schedule_tail(trainer_->config(), s_.schedule, s_.next, s_.vacate_at);
}

void TrainJob::adopt_rest_of_schedule(const std::string& text) {  // the inverse, on another rank
  decode_schedule_tail(text, s_.schedule, s_.vacate_at);
}

void TrainJob::skip_past_entries() {
  s_.next = 0;
  while (s_.next < s_.schedule.size() && s_.schedule[s_.next].first <= s_.step) ++s_.next;
}

// Requests from `dynatrain request` (rank 0 takes and answers them, job/job_control.h): a
// switch goes into the schedule at its step, or as soon as it can be prepared; never before a
// switch already being prepared. Rank 0 only; the others learn the schedule in sync_job().
void TrainJob::take_request() {
  RequestContext ctx{s_.schedule,
                     s_.vacate_at,
                     s_.next,
                     s_.step,
                     args_.steps,
                     trainer_->lookahead(),
                     trainer_->preparing(),
                     trainer_->world_size(),
                     trainer_->config(),
                     [this](vps::ParallelConfig& c) { Trainer::check_supported(o_, c); }};
  control_.take_requests(ctx);
}

// Periodic saves; none at the step resumed from, unless saving into another directory (that
// first save is then the resumed state itself).
bool TrainJob::save_point(std::int64_t s) const {
  return !args_.save_dir.empty() && args_.save_every > 0 && s % args_.save_every == 0 &&
         (s > s_.first_step || s_.resumed_elsewhere);
}

// The memory copy: at every boundary between two steps, except the one resumed from it and a
// joined process's first (its starters copied that step before it joined).
bool TrainJob::copy_point(std::int64_t s) const {
  return memory_copy_redundancy() > 0 && s > 0 && s < args_.steps && s != s_.joined_at &&
         !(s == s_.first_step && s_.resumed_from_copy);
}

bool TrainJob::save_due(std::int64_t s) const {
  return !args_.save_dir.empty() && args_.save_every > 0 && s > s_.first_step && s < args_.steps &&
         s % args_.save_every == 0;
}

bool TrainJob::outside_needed() const {  // on rank 0: must ranks outside the layout run to the next sync?
  const std::int64_t step = s_.step;
  if (save_due(step + 1)) return true;
  if (s_.next >= s_.schedule.size()) return false;
  const std::int64_t at = s_.schedule[s_.next].first;
  if (trainer_->preparing()) return at == step + 1 && step + 1 < args_.steps;  // the next commit
  return step + trainer_->lookahead() >= at ||                                 // a prepare now
         (step + 1 < args_.steps && step + 1 + trainer_->lookahead() >= at);   // or next step
}

// With --job, once per step after any commit: rank 0 takes a request and sends the schedule
// (with the step) to the other ranks. Ranks of the current layout get it every step; ranks
// outside it only when they have something to do before the next sync (a prepare, a commit,
// a checkpoint) and otherwise wait here without spinning (a sleep-polled receive), as they
// do in a prepare without --job. Returns false when rank 0 ends the run (kJobEnd).
bool TrainJob::sync_job() {
  comm::Transport& w = trainer_->world();
  const int layout_ranks = trainer_->config().world_size();
  if (w.rank() == 0) {
    take_request();
    const bool wake_outside = outside_needed();
    std::string body = rest_of_schedule();
    JobSync msg{kJobSchedule, s_.step, body.size()};
    for (int r = 1; r < w.size(); ++r)
      if (r < layout_ranks || wake_outside) send_job_sync(w, r, msg, body);
    s_.outside_waiting = !wake_outside;
    return true;
  }
  std::string body;
  const JobSync msg = receive_job_sync(w, body, /*sleep_poll=*/w.rank() >= layout_ranks);
  if (msg.kind == kJobEnd) return false;
  s_.step = msg.step;
  adopt_rest_of_schedule(body);
  s_.next = 1;  // entry 0 is the current layout
  return true;
}

void TrainJob::end_job() {  // the leader, after the last step: release ranks waiting in sync_job
  if (args_.job.empty() || !s_.leader || !s_.outside_waiting) return;
  comm::Transport& w = trainer_->world();
  for (int r = trainer_->config().world_size(); r < w.size(); ++r)
    send_job_sync(w, r, JobSync{kJobEnd, s_.step, 0}, {});
}

}  // namespace dynatrain::job
