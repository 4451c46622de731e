// The job's side of the scheduler protocol (docs/edm.md, "Driving a job from a scheduler"),
// run by the leader of a `dynatrain train --job DIR` job: it holds DIR (job/job_status.h),
// takes queued requests at step boundaries and puts them into the schedule, answers each one
// (job/job_request.h), keeps status.json and appends to events.jsonl (job/job_events.h).
// The training loop (job/train_job.cc) calls it at its boundaries; it moves with the leader
// role (hand_over / take_over, inside LeaderState). Every call is a no-op without --job.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "job/job_status.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

using Schedule = std::vector<std::pair<std::int64_t, vps::ParallelConfig>>;

// Puts a switch to `config` before step `at` into `schedule` (entries from `from` on, in step
// order), replacing the entry already at that step: how requests and notices change the schedule.
void place_switch(Schedule& schedule, std::size_t from, std::int64_t at, const vps::ParallelConfig& config);

// Answers request `id` in DIR refused, `why` its one line, and records request_refused in the
// event log this process holds (if any); nothing for an empty id. Whoever ends a job with
// requests left (the leader, or the supervisor between attempts) answers them through this.
void refuse_request(const std::string& dir, const std::string& id, const std::string& why);

// What deciding a request needs from the training loop at a step boundary.
struct RequestContext {
  Schedule& schedule;                              // entries from `next` on are still to come
  std::map<std::int64_t, std::string>& vacate_at;  // step -> ranks to vacate (or kVacateAll)
  std::size_t next = 0;                            // the first entry not yet committed
  std::int64_t step = 0, steps = 0, lookahead = 0;
  bool preparing = false;  // schedule[next] is being prepared
  int world_size = 0;
  vps::ParallelConfig current;
  std::function<void(vps::ParallelConfig&)> check_supported;  // InputError: the trainer cannot run it (may complete it)
};

class JobControl {
 public:
  explicit JobControl(std::string dir);  // "" (no --job): every call does nothing
  ~JobControl();                         // unwinding on the leader: job_ended with an error
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;

  // The first leader takes DIR and records job_started with `fields`. Returns "" or why it
  // cannot (job/job_status.h: hold_job_dir). A restarted attempt (its supervisor held DIR)
  // takes the requests the failed attempt had accepted into its first take_requests; a new
  // job refuses what an ended job left queued or accepted.
  std::string start(const nlohmann::json& fields);
  // A process that became the leader in a commit: `handed` is the old leader's hand_over().
  void take_over(const nlohmann::json& handed, std::int64_t step);
  nlohmann::json hand_over() const;
  // The old leader after a commit that gave rank 0 away: stops writing, ends nothing.
  void resign();

  // Takes every queued request, oldest first: accepted ones go into ctx.schedule (a request
  // for a step that already has a requested switch supersedes it), the others are refused.
  // A lend (`request --lend N`) switches to the same tp, pp and cp on N processes fewer and
  // keeps every process (kKeepProcesses in ctx.vacate_at); a reclaim switches back to the
  // layout from before it; other switches are refused while processes are lent.
  void take_requests(RequestContext& ctx);
  void switch_prepared(std::int64_t step, const std::string& from, const std::string& to);
  // The switch planned before step `from` commits before step `to` instead (a notice that cannot
  // wait for it): the request that asked for it is answered at `to`.
  void switch_moved(std::int64_t from, std::int64_t to);
  // After a commit at `step`: `record` is the switch's JSON record (job/train_job.cc). Answers
  // the request that asked for it (committed, or refused when the switch was).
  void switch_done(std::int64_t step, const nlohmann::json& record);
  // At every step boundary: step, layout, processes (status.json at most once a second).
  void boundary(std::int64_t step, const std::string& layout, int processes);
  // The job's last act on the leader: refuses what is still queued, job_ended, releases DIR.
  void end(int exit_code, std::int64_t step);

 private:
  struct Pending {
    std::string id, to;
    int shift = 0;     // 1: a lend, -1: a reclaim, 0: another switch
    std::string lent;  // a lend or reclaim: the layout from before the lend
  };
  void answer_taken(RequestContext& ctx, const std::string& id, const struct JobRequest& r);
  vps::ParallelConfig lend_target(const RequestContext& ctx, const struct JobRequest& r) const;
  void refuse(const std::string& id, const std::string& why, const std::string& layout);
  void refuse_quietly(const std::string& id, const std::string& why);  // answer and event, no line
  // A new job's start: what a job that ended left queued or accepted (`previous`: its status).
  void refuse_left_behind(const nlohmann::json& previous, const std::string& why);
  void write_status(bool now);
  std::string dir_;
  bool leading_ = false;
  std::map<std::int64_t, Pending> pending_;           // accepted, not yet committed, by switch step
  nlohmann::json carried_ = nlohmann::json::array();  // a restart's: the failed attempt's pending_requests
  std::set<std::string> reported_;                    // entries that could not be removed (said once)
  std::unique_ptr<StatusFile> status_;
  nlohmann::json last_switch_;
  std::string lent_;           // while processes are lent (or a lend is accepted): the layout before it
  std::int64_t lent_at_ = -1;  // the step of the last accepted lend or reclaim
  std::string health_ = "running";
};

}  // namespace dynatrain::job
