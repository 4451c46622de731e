// Switch requests from outside a running job: `dynatrain request --job DIR --to CONFIG
// [--at-step S] [--wait]` places a request in DIR/requests/; the leader of a `dynatrain train
// --job DIR` job takes every queued request, oldest first, at each step boundary, and answers
// each in DIR/answers/ID.json: accepted (with the step it switches before), then committed or
// refused, or superseded when a later request replaced it before it ran. How a cluster
// scheduler tells a job that GPUs came or went (docs/edm.md, "Driving a job from a scheduler").
//
// A request file is one JSON object, {"version": 1, "to": CONFIG, "at_step": S, "vacate": "1,3"}
// ("vacate": "all" is `request --migrate`; {"lend": N} and {"reclaim": true}, without "to", are
// `request --lend N` and `request --reclaim`), named ID.json, ID = 19-digit Unix nanoseconds,
// host and pid, so names sort in the order requests were placed. Written to a temporary name,
// fsync'd and renamed: the job never reads half a request. Anything else in requests/ (another
// name, a FIFO, a directory, malformed JSON, an unknown version) is refused with one line and
// removed; it is never opened for reading unless it is a regular file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/transport.h"

namespace dynatrain::job {

struct JobRequest {
  std::string to;             // config string; "" with vacate == kVacateAll: keep the layout
  std::int64_t at_step = -1;  // -1: as soon as possible
  std::string vacate;         // world ranks that must hold nothing and leave ("1,3"); "" = none;
                              // kVacateAll = every process of the job (a whole-job migration)
  int lend = 0;               // > 0: the layout's state leaves this many processes, which stay, idle
  bool reclaim = false;       // the lent processes take the layout from before the lend back
};
inline constexpr const char* kVacateAll = "all";
// In a job's vacate-by-step map: the switch keeps every process (a lend; vacates none).
inline constexpr const char* kKeepProcesses = "keep";
inline constexpr int kRequestVersion = 1;  // of request and answer files

// "1,3" -> {1, 3}; InputError naming the bad token (ranks are non-negative integers).
std::vector<int> parse_rank_list(const std::string& text);

// The checks the CLI makes before placing a request (InputError naming the bad value): a
// config that parses, --at-step >= 0 or -1, a valid rank list. The job checks the rest (the
// trainer supports the layout, the ranks exist, the step is not past the end).
void check_request(const JobRequest& request);

std::string request_to_json(const JobRequest& request);
// The inverse: InputError with one line ("malformed request: ...", "request version 2 is not
// supported; this job reads version 1").
JobRequest request_from_json(const std::string& text);

// Checks the request (check_request) and that a live job holds DIR (job/job_status.h:
// require_live_job), then places it in DIR/requests/. Returns its id. InputError otherwise.
std::string place_request(const std::string& dir, const JobRequest& request);

// One entry of DIR/requests/ taken by the leader: a request, or the one-line reason it was refused.
struct TakenRequest {
  std::string id;                     // the file name without ".json"
  std::optional<JobRequest> request;  // nullopt: refused (why)
  std::string why;
};
// Takes (reads and removes) every request in DIR/requests/, oldest first. Never blocks on a FIFO.
std::vector<TakenRequest> take_requests(const std::string& dir);

// DIR/answers/ID.json: the job's answer to a request, replaced as it moves on.
enum class AnswerState { kAccepted, kCommitted, kRefused, kSuperseded };
const char* answer_state_name(AnswerState state);
struct Answer {
  std::string id;
  AnswerState state = AnswerState::kAccepted;
  std::int64_t step = -1;  // accepted / committed: the step the switch happens before
  std::string to;          // the layout it switches to (accepted / committed)
  std::string reason;      // refused: one line; superseded: "replaced by request ID"
  nlohmann::json figures;  // committed: pause_s, prepare_s, hidden_fraction, bytes_sent, ...
};
void write_answer(const std::string& dir, const Answer& answer);  // best effort (never throws)
// nullopt while there is no answer (or it is being replaced); InputError on a malformed one.
std::optional<Answer> read_answer(const std::string& dir, const std::string& id);

// How rank 0 of a `train --job` run tells the other ranks, once per step, the schedule it took
// requests into (job/train_job.cc). Point-to-point on the world with tags of their own, so
// that ranks outside the current layout can wait for it without spinning in a collective.
enum JobSyncKind : std::uint64_t { kJobSchedule = 1, kJobEnd = 2 };
struct JobSync {
  std::uint64_t kind = kJobSchedule;
  std::int64_t step = 0;         // the step whose boundary this is
  std::uint64_t body_bytes = 0;  // the schedule from the current layout on (--schedule syntax)
};
void send_job_sync(comm::Transport& world, int to, const JobSync& msg, const std::string& body);
// From world rank 0. sleep_poll: test every 10 ms instead of blocking inside MPI (ranks that
// may wait for many steps; they are woken a step before they have work).
JobSync receive_job_sync(comm::Transport& world, std::string& body, bool sleep_poll);

}  // namespace dynatrain::job
