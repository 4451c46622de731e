#include "job/job_control.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>

#include "common/error.h"
#include "job/job_events.h"
#include "job/job_files.h"
#include "job/job_request.h"

namespace dynatrain::job {

void place_switch(Schedule& schedule, std::size_t from, std::int64_t at, const vps::ParallelConfig& config) {
  std::size_t i = from;
  while (i < schedule.size() && schedule[i].first < at) ++i;
  if (i < schedule.size() && schedule[i].first == at)
    schedule[i].second = config;
  else
    schedule.insert(schedule.begin() + static_cast<std::ptrdiff_t>(i), {at, config});
}

JobControl::JobControl(std::string dir) : dir_(std::move(dir)) {}

JobControl::~JobControl() {
  if (!leading_ || std::uncaught_exceptions() == 0) return;
  // An error ends the job on this rank: the scheduler sees why in the events, not only on stderr.
  health_ = "ended";
  record_event("job_ended", {{"exit_code", -1}, {"error", "an error ended the job (its one line is on stderr)"}});
  status_->update(
      [](nlohmann::json& s) {
        s["health"] = "ended";
        s["exit_code"] = -1;
      },
      true);
  status_.reset();
  release_job_dir(dir_);
  close_event_log();
}

std::string JobControl::start(const nlohmann::json& fields) {
  if (dir_.empty()) return "";
  // A restart takes over from its supervisor what the failed attempt had accepted; a new job
  // answers what a job that ended left behind (it was asked of that job, not of this one).
  const bool restarted = held_by_supervisor(dir_);
  const nlohmann::json previous = read_status(dir_);
  const std::string why = hold_job_dir(dir_, /*take_over=*/false);
  if (!why.empty()) return why;
  status_ = std::make_unique<StatusFile>(dir_);
  leading_ = true;
  open_event_log(dir_, [this](const nlohmann::json&) { write_status(true); });
  nlohmann::json f = fields;
  f["pid"] = static_cast<long>(getpid());
  f["host"] = host_name();
  record_event("job_started", f);
  if (restarted)
    carried_ = previous.value("pending_requests", nlohmann::json::array());
  else
    refuse_left_behind(previous, "the job that held " + dir_ + " ended before running it");
  return "";
}

void JobControl::refuse_left_behind(const nlohmann::json& previous, const std::string& why) {
  for (const auto& t : job::take_requests(dir_)) refuse_quietly(t.id, why);
  if (previous.value("health", "") != "ended")
    for (const auto& p : previous.value("pending_requests", nlohmann::json::array()))
      refuse_quietly(p.value("request", ""), why);
}

void refuse_request(const std::string& dir, const std::string& id, const std::string& why) {
  if (id.empty()) return;
  write_answer(dir, Answer{id, AnswerState::kRefused, -1, "", why, {}});
  record_event("request_refused", {{"request", id}, {"reason", why}});
}

void JobControl::refuse_quietly(const std::string& id, const std::string& why) {
  if (!id.empty() && reported_.insert(id).second) refuse_request(dir_, id, why);
}

void JobControl::take_over(const nlohmann::json& handed, std::int64_t step) {
  if (dir_.empty()) return;
  const std::string why = hold_job_dir(dir_, /*take_over=*/true);
  if (!why.empty()) DT_INPUT_ERROR("the new leader cannot take the job directory: ", why);
  status_ = std::make_unique<StatusFile>(dir_);
  leading_ = true;
  pending_.clear();
  for (const auto& p : handed.value("pending", nlohmann::json::array()))
    pending_[p.at("step").get<std::int64_t>()] =
        Pending{p.at("id").get<std::string>(), p.at("to").get<std::string>(), p.value("shift", 0), p.value("lent", "")};
  last_switch_ = handed.value("last_switch", nlohmann::json());
  lent_ = handed.value("lent", "");
  lent_at_ = handed.value("lent_at", std::int64_t{-1});
  open_event_log(dir_, [this](const nlohmann::json&) { write_status(true); });
  record_event("leader_moved", {{"step", step}, {"pid", static_cast<long>(getpid())}, {"host", host_name()}});
}

nlohmann::json JobControl::hand_over() const {
  nlohmann::json pending = nlohmann::json::array();
  for (const auto& [step, p] : pending_)
    pending.push_back({{"step", step}, {"id", p.id}, {"to", p.to}, {"shift", p.shift}, {"lent", p.lent}});
  return {{"pending", pending}, {"last_switch", last_switch_}, {"lent", lent_}, {"lent_at", lent_at_}};
}

void JobControl::resign() {
  if (!leading_) return;
  leading_ = false;
  status_.reset();
  close_event_log();
}

void JobControl::refuse(const std::string& id, const std::string& why, const std::string& layout) {
  std::printf("request refused: %s; training continues in %s\n", why.c_str(), layout.c_str());
  write_answer(dir_, Answer{id, AnswerState::kRefused, -1, "", why, {}});
  record_event("request_refused", {{"request", id}, {"reason", why}});
}

void JobControl::take_requests(RequestContext& ctx) {
  if (!leading_) return;
  // Accepted by the attempt before a restart: decided again for this attempt's layout and step.
  for (const auto& p : std::exchange(carried_, nlohmann::json::array()))
    answer_taken(ctx, p.value("request", ""), JobRequest{p.value("to", ""), p.value("step", std::int64_t{-1}), ""});
  for (const auto& t : job::take_requests(dir_)) {
    if (t.request)
      answer_taken(ctx, t.id, *t.request);
    else if (reported_.insert(t.id).second)
      refuse(t.id, t.why, ctx.current.str());
  }
}

// The layout a --lend or --reclaim request switches to (InputError: it cannot run now). A lend
// keeps tp, pp and cp and takes dp from the processes that stay.
vps::ParallelConfig JobControl::lend_target(const RequestContext& ctx, const JobRequest& r) const {
  if (r.reclaim) {
    if (lent_.empty()) DT_INPUT_ERROR("--reclaim: no process is lent; --lend N lends some");
    return vps::ParallelConfig::parse(lent_);
  }
  if (!lent_.empty())
    DT_INPUT_ERROR("--lend ", r.lend, " while processes are lent (the layout before: ", lent_, "): --reclaim first");
  if (ctx.next < ctx.schedule.size())
    DT_INPUT_ERROR("--lend ", r.lend, " while a switch to ", ctx.schedule[ctx.next].second.str(), " before step ",
                   ctx.schedule[ctx.next].first, " is still to come; lend after it ran");
  const vps::ParallelConfig& c = ctx.current;
  const int all = c.world_size(), stay = all - r.lend, group = c.tp * c.cp * c.pp;
  if (stay < 1)
    DT_INPUT_ERROR("--lend ", r.lend, ": valid: 1 to ", all - 1, " (processes of ", c.str(), "; one must stay)");
  if (stay % group)
    DT_INPUT_ERROR("--lend ", r.lend, ": ", stay, " processes stay of the layout's ", all,
                   ", not a multiple of tp*cp*pp=", group, " (", c.str(), "); lend a multiple of it");
  vps::ParallelConfig next = c;
  next.dp = stay / group;
  return next;
}

void JobControl::answer_taken(RequestContext& ctx, const std::string& id, const JobRequest& r) {
  vps::ParallelConfig config;
  const bool shift = r.lend > 0 || r.reclaim;
  try {
    if (!shift && !lent_.empty())
      DT_INPUT_ERROR("a switch while processes are lent (the layout before the lend: ", lent_, "): --reclaim first");
    config = shift ? lend_target(ctx, r) : r.to.empty() ? ctx.current : vps::ParallelConfig::parse(r.to);
    ctx.check_supported(config);
    const std::vector<int> vacate = r.vacate == kVacateAll || shift ? std::vector<int>{} : parse_rank_list(r.vacate);
    for (int v : vacate)
      if (v >= ctx.world_size) DT_INPUT_ERROR("cannot vacate rank ", v, ": valid ranks are 0..", ctx.world_size - 1);
  } catch (const InputError& e) {
    return refuse(id, e.what(), ctx.current.str());
  }
  // Never before a switch already being prepared; without --at-step, after the look-ahead.
  std::int64_t at = r.at_step >= 0 ? r.at_step : ctx.step + ctx.lookahead;
  std::int64_t earliest = ctx.step + 1;
  if (ctx.preparing) earliest = std::max(earliest, ctx.schedule[ctx.next].first + 1);
  // Never replacing an accepted lend or reclaim.
  at = std::max({at, earliest, lent_at_ + 1});
  if (at >= ctx.steps)  // it would never run
    return refuse(id,
                  "a switch before step " + std::to_string(at) + " is at or past --steps " + std::to_string(ctx.steps),
                  ctx.current.str());
  place_switch(ctx.schedule, ctx.next, at, config);
  const std::string vacate = r.lend > 0 ? kKeepProcesses : r.vacate;
  if (vacate.empty())
    ctx.vacate_at.erase(at);
  else
    ctx.vacate_at[at] = vacate;
  if (shift) {  // what a refused lend or reclaim puts back (switch_done)
    lent_ = r.lend > 0 ? ctx.current.str() : "";
    lent_at_ = at;
  }
  if (const auto old = pending_.find(at); old != pending_.end()) {
    const std::string why = "replaced by request " + id + " before it ran";
    write_answer(dir_, Answer{old->second.id, AnswerState::kSuperseded, at, old->second.to, why, {}});
    record_event("request_superseded", {{"request", old->second.id}, {"by", id}, {"step", at}});
  }
  pending_[at] = Pending{id, config.str(),
                         r.lend > 0  ? 1
                         : r.reclaim ? -1
                                     : 0,
                         r.lend > 0  ? ctx.current.str()
                         : r.reclaim ? config.str()
                                     : ""};
  std::printf("request: switch to %s before step %lld%s (request %s)\n", config.str().c_str(),
              static_cast<long long>(at), r.vacate.empty() ? "" : (", vacating ranks " + r.vacate).c_str(), id.c_str());
  write_answer(dir_, Answer{id, AnswerState::kAccepted, at, config.str(), "", {}});
  record_event("request_accepted", {{"request", id}, {"step", at}, {"to", config.str()}, {"vacate", r.vacate}});
}

void JobControl::switch_prepared(std::int64_t step, const std::string& from, const std::string& to) {
  if (!leading_) return;
  health_ = "switching";
  record_event("switch_prepared", {{"step", step}, {"from", from}, {"to", to}});
}

void JobControl::switch_moved(std::int64_t from, std::int64_t to) {
  if (auto asked = pending_.extract(from)) {
    asked.key() = to;
    pending_.insert(std::move(asked));
  }
  if (lent_at_ == from) lent_at_ = to;
}

void JobControl::switch_done(std::int64_t step, const nlohmann::json& record) {
  if (!leading_) return;
  health_ = "running";
  last_switch_ = {{"step", step}};
  for (const char* key : {"from", "to", "refused", "world_before", "world_after", "pause_s", "prepare_s",
                          "hidden_fraction", "bytes_sent", "max_bytes_received", "placement"})
    if (record.contains(key)) last_switch_[key] = record[key];
  const std::string refused = record.value("refused", "");
  const auto asked = pending_.find(step);
  nlohmann::json event = last_switch_;
  if (asked != pending_.end()) event["request"] = asked->second.id;
  record_event(refused.empty() ? "switch_committed" : "switch_refused", event);
  if (asked == pending_.end()) return;
  if (!refused.empty() && asked->second.shift != 0)  // a refused lend lends nothing; a refused reclaim leaves them lent
    lent_ = asked->second.shift > 0 ? "" : asked->second.lent;
  Answer a{asked->second.id,
           refused.empty() ? AnswerState::kCommitted : AnswerState::kRefused,
           step,
           asked->second.to,
           refused,
           last_switch_};
  write_answer(dir_, a);
  pending_.erase(asked);
  write_status(true);
}

void JobControl::boundary(std::int64_t step, const std::string& layout, int processes) {
  if (!leading_) return;
  status_->update(
      [&](nlohmann::json& s) {
        s["step"] = step;
        s["layout"] = layout;
        s["processes"] = processes;
      },
      false);
  write_status(false);
}

void JobControl::write_status(bool now) {
  if (!status_) return;
  nlohmann::json pending = nlohmann::json::array();
  for (const auto& [step, p] : pending_) pending.push_back({{"request", p.id}, {"step", step}, {"to", p.to}});
  status_->update(
      [&](nlohmann::json& s) {
        s["job_dir"] = dir_;
        s["leader"] = {{"pid", static_cast<long>(getpid())}, {"host", host_name()}};
        s["health"] = health_;
        s["last_switch"] = last_switch_;
        s["pending_requests"] = pending;
      },
      now);
}

void JobControl::end(int exit_code, std::int64_t step) {
  if (!leading_) return;
  health_ = "ending";
  const std::string after = "the job ended after step " + std::to_string(step - 1);
  for (const auto& t : job::take_requests(dir_)) refuse_quietly(t.id, after + " before taking it");
  for (const auto& p : std::exchange(carried_, nlohmann::json::array()))
    refuse_quietly(p.value("request", ""), after + " before taking it again after a restart");
  for (const auto& [at, p] : pending_) {
    write_answer(dir_, Answer{p.id, AnswerState::kRefused, at, p.to, after, {}});
    record_event("request_refused", {{"request", p.id}, {"reason", after}});
  }
  pending_.clear();
  health_ = "ended";
  record_event("job_ended", {{"exit_code", exit_code}, {"step", step}});
  status_->update([&](nlohmann::json& s) { s["exit_code"] = exit_code; }, true);
  status_.reset();
  release_job_dir(dir_);
  close_event_log();
  leading_ = false;
}

}  // namespace dynatrain::job
