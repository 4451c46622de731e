// `dynatrain request`: asks a running `dynatrain train --job DIR` job to switch layout
// (job/job_request.h); with --wait, follows the request to its answer.
#include <chrono>
#include <cstdio>
#include <limits>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "job/job_request.h"
#include "job/job_status.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace dynatrain::tools {

namespace {

// Polls DIR/answers/ID.json until the request is committed (0), refused or superseded
// (InputError: exit 2), or the job is gone without an answer or `timeout_s` passes (1).
int wait_for_answer(const std::string& dir, const std::string& id, double timeout_s) {
  const auto t0 = Clock::now();
  bool said_accepted = false;
  for (;;) {
    const std::string gone = job::why_no_live_job(dir);  // before the answer: an answer then death is an answer
    if (const auto a = job::read_answer(dir, id)) {
      if (a->state == job::AnswerState::kCommitted) {
        std::printf("request %s: committed before step %lld (%s, pause %.2f ms)\n", id.c_str(),
                    static_cast<long long>(a->step), a->to.c_str(), a->figures.value("pause_s", 0.0) * 1e3);
        return 0;
      }
      if (a->state != job::AnswerState::kAccepted)
        DT_INPUT_ERROR("request ", id, " ", job::answer_state_name(a->state), ": ", a->reason);
      if (!said_accepted) {
        std::printf("request %s: accepted, switch to %s before step %lld\n", id.c_str(), a->to.c_str(),
                    static_cast<long long>(a->step));
        std::fflush(stdout);
        said_accepted = true;
      }
    }
    if (!gone.empty()) {
      std::fprintf(stderr, "dynatrain: request %s: the job ended without answering: %s\n", id.c_str(), gone.c_str());
      return 1;
    }
    if (timeout_s > 0 && seconds_since(t0) > timeout_s) {
      std::fprintf(stderr, "dynatrain: request %s: no final answer after %g s (--timeout); it is %s\n", id.c_str(),
                   timeout_s, said_accepted ? "accepted" : "queued");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Command add_request_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto req = std::make_shared<job::JobRequest>();
  auto* cmd = app.add_subcommand("request",
                                 "Ask a running train --job DIR job to switch layout, or to lend / reclaim processes");
  cmd->add_option("--job", *dir, "The job's directory (train --job DIR)")->required();
  auto migrate = std::make_shared<bool>(false);
  auto wait = std::make_shared<bool>(false);
  auto timeout_s = std::make_shared<double>(0);
  cmd->add_option("--to", req->to, "Layout to switch to, e.g. tp=2,dp=4 (with --migrate: default the current one)");
  cmd->add_option("--at-step", req->at_step, "Step before which to switch (default: as soon as prepared)")
      ->check(whole_number_in(std::int64_t{0}, std::numeric_limits<std::int64_t>::max()));
  cmd->add_option("--vacate", req->vacate,
                  "World ranks that must hold nothing afterwards and leave, e.g. 1,3 (0 too: the "
                  "job's leader role moves); processes are started for the ranks they held");
  cmd->add_option("--lend", req->lend,
                  "Lend N processes: the state leaves the layout's last N (same tp, pp, cp; dp from the "
                  "rest), which stay in the job, idle, until --reclaim")
      ->check(whole_number_in(1, std::numeric_limits<int>::max()));
  cmd->add_flag("--reclaim", req->reclaim,
                "Take the lent processes back: the layout from before the lend, no process started");
  cmd->add_flag("--migrate", *migrate,
                "Move the whole job onto new processes (vacate every process); the old ones exit");
  cmd->add_flag("--wait", *wait,
                "Wait for the answer: exit 0 when committed, 2 when refused or superseded, 1 when the "
                "job ends without answering or --timeout passes");
  cmd->add_option("--timeout", *timeout_s, "With --wait: give up after S seconds (default: no limit)");
  return [dir, req, migrate, wait, timeout_s] {
    if (*migrate) {
      if (!req->vacate.empty()) DT_INPUT_ERROR("--migrate vacates every process; drop --vacate ", req->vacate);
      req->vacate = job::kVacateAll;
    }
    if (*timeout_s != 0) {
      if (!*wait) DT_INPUT_ERROR("--timeout ", *timeout_s, " needs --wait");
      require_positive_finite("--timeout", *timeout_s, 1e9);
    }
    const std::string id = job::place_request(*dir, *req);
    const std::string to = req->lend > 0     ? "lend " + std::to_string(req->lend) + " processes"
                           : req->reclaim    ? std::string("reclaim the lent processes")
                           : req->to.empty() ? std::string("(current layout)")
                                             : req->to;
    std::printf("request %s: %s -> %s%s%s\n", id.c_str(), dir->c_str(), to.c_str(),
                req->at_step >= 0 ? (" at step " + std::to_string(req->at_step)).c_str() : "",
                req->vacate.empty() ? "" : (", vacating ranks " + req->vacate).c_str());
    std::fflush(stdout);
    return *wait ? wait_for_answer(*dir, id, *timeout_s) : 0;
  };
}

}  // namespace dynatrain::tools
