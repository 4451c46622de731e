// TrainJob's schedule as it changes: prepares, requests from `dynatrain request`, and the
// per-step job sync that hands rank 0's schedule to the other ranks (--job DIR).
#include <cstdio>
#include <sstream>

#include "common/error.h"
#include "job/fault_injection.h"
#include "job/job_request.h"
#include "job/train_job_run.h"

namespace dynatrain::job {
using namespace dynatrain::train;  // the trainer this command drives

void TrainJob::maybe_prepare() {
  if (s_.next >= s_.schedule.size() || trainer_->preparing() ||
      s_.step + trainer_->lookahead() < s_.schedule[s_.next].first)
    return;
  const auto& [at, config] = s_.schedule[s_.next];
  trainer_->prepare(config, rest_of_schedule(), vacated_ranks(at));
  fault_point("prepare", trainer_->world().rank());  // fires DELAY_MS into the background prepare
  s_.preparing = config.str();
}

std::vector<int> TrainJob::vacated_ranks(std::int64_t at) const {
  const auto it = s_.vacate_at.find(at);
  if (it == s_.vacate_at.end()) return {};
  if (it->second != kVacateAll) return parse_rank_list(it->second);
  std::vector<int> all(static_cast<std::size_t>(trainer_->world_size()));
  for (int r = 0; r < trainer_->world_size(); ++r) all[static_cast<std::size_t>(r)] = r;
  return all;
}

// The schedule from entry `next` on, as a valid --schedule string (processes started by the
// switch being prepared continue from it: it holds switches requested while running), then
// "|STEP:R1,R2;..." for the switches among them that vacate ranks ("STEP:all": --migrate).
std::string TrainJob::rest_of_schedule() const {
  std::string s = "0:", v;
  s.append(trainer_->config().str());
  for (std::size_t i = s_.next; i < s_.schedule.size(); ++i) {
    const auto& [at, config] = s_.schedule[i];
    s.append(";").append(std::to_string(at)).append(":").append(config.str());
    if (auto it = s_.vacate_at.find(at); it != s_.vacate_at.end())
      v.append(v.empty() ? "" : ";").append(std::to_string(at)).append(":").append(it->second);
  }
  return v.empty() ? s : s.append("|").append(v);
}

void TrainJob::adopt_rest_of_schedule(const std::string& text) {  // the inverse, on another rank
  const auto bar = text.find('|');
  s_.schedule = parse_schedule(text.substr(0, bar));
  s_.vacate_at.clear();
  if (bar == std::string::npos) return;
  std::stringstream items(text.substr(bar + 1));
  std::string item;
  while (std::getline(items, item, ';')) {
    const auto colon = item.find(':');
    s_.vacate_at[std::stoll(item.substr(0, colon))] = item.substr(colon + 1);
  }
}

void TrainJob::skip_past_entries() {
  s_.next = 0;
  while (s_.next < s_.schedule.size() && s_.schedule[s_.next].first <= s_.step) ++s_.next;
}

// A request from `dynatrain request` (rank 0 reads it and decides): the switch goes into the
// schedule at its step, or as soon as it can be prepared; never before a switch already being
// prepared. Rank 0 only; the others learn the schedule in sync_job().
void TrainJob::take_request() {
  auto q = take_job_request(args_.job);
  if (!q) return;
  vps::ParallelConfig config;
  try {
    config = q->to.empty() ? trainer_->config() : vps::ParallelConfig::parse(q->to);
    Trainer::check_supported(o_, config);
    // Named ranks only (`--migrate`: resolved when the switch is prepared).
    const std::vector<int> vacate = q->vacate != kVacateAll ? parse_rank_list(q->vacate) : std::vector<int>{};
    for (int v : vacate)
      if (v >= trainer_->world_size())
        DT_INPUT_ERROR("cannot vacate rank ", v, ": valid ranks are 0..", trainer_->world_size() - 1);
  } catch (const InputError& e) {
    std::printf("request refused: %s; training continues in %s\n", e.what(), trainer_->config().str().c_str());
    return;
  }
  std::int64_t at = q->at_step >= 0 ? q->at_step : s_.step + trainer_->lookahead();
  std::int64_t earliest = s_.step + 1;
  if (trainer_->preparing()) earliest = std::max(earliest, s_.schedule[s_.next].first + 1);
  at = std::max(at, earliest);
  if (at >= args_.steps) {  // it would never run
    std::printf("request refused: a switch before step %lld is at or past --steps %lld; training continues in %s\n",
                static_cast<long long>(at), static_cast<long long>(args_.steps), trainer_->config().str().c_str());
    return;
  }
  std::size_t i = s_.next;
  while (i < s_.schedule.size() && s_.schedule[i].first < at) ++i;
  if (i < s_.schedule.size() && s_.schedule[i].first == at) s_.schedule[i].second = config;
  else s_.schedule.insert(s_.schedule.begin() + static_cast<std::ptrdiff_t>(i), {at, config});
  if (q->vacate.empty()) s_.vacate_at.erase(at);
  else s_.vacate_at[at] = q->vacate;
  std::printf("request: switch to %s before step %lld%s\n", config.str().c_str(), static_cast<long long>(at),
              q->vacate.empty() ? "" : (", vacating ranks " + q->vacate).c_str());
}

// Periodic saves; none at the step resumed from, unless saving into another directory (that
// first save is then the resumed state itself).
bool TrainJob::save_point(std::int64_t s) const {
  return !args_.save_dir.empty() && args_.save_every > 0 && s % args_.save_every == 0 &&
         (s > s_.first_step || s_.resumed_elsewhere);
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
         (step + 1 < args_.steps && step + 1 + trainer_->lookahead() >= at);    // or next step
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
