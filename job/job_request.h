// Switch requests from outside a running job: `dynatrain request --job DIR --to CONFIG
// [--at-step S]` writes DIR/request; a `dynatrain train --job DIR` job takes it (rank 0 reads and
// removes the file at every step boundary, all ranks agree on it) and switches at step S, or
// as soon as the switch can be prepared. How a cluster scheduler tells a job that GPUs came or
// went.
//
// File format (one key a line): "to=CONFIG" and optionally "at_step=S", "vacate=R1,R2" (or
// "vacate=all": `request --migrate`). Written to a temporary
// name and renamed, so the job never reads half a request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::job {

struct JobRequest {
  std::string to;             // config string
  std::int64_t at_step = -1;  // -1: as soon as possible
  std::string vacate;         // world ranks that must hold nothing and leave ("1,3"); "" = none;
                              // kVacateAll = every process of the job (a whole-job migration)
};
inline constexpr const char* kVacateAll = "all";

// "1,3" -> {1, 3}; InputError naming the bad token (ranks are non-negative integers).
std::vector<int> parse_rank_list(const std::string& text);

// Validates the config string (InputError) and writes DIR/request (InputError if DIR is not a
// writable directory).
void write_job_request(const std::string& dir, const JobRequest& request);

// Reads and removes DIR/request; nullopt when there is none. A malformed file becomes a request
// whose `to` is the file's text, so that the job refuses it with a message.
std::optional<JobRequest> take_job_request(const std::string& dir);

// How rank 0 of a `train --job` run tells the other ranks, once per step, the schedule it took
// requests into (job/train_job.cc). Point-to-point on the world with tags of their own, so
// that ranks outside the current layout can wait for it without spinning in a collective.
enum JobSyncKind : std::uint64_t { kJobSchedule = 1, kJobEnd = 2 };
struct JobSync {
  std::uint64_t kind = kJobSchedule;
  std::int64_t step = 0;        // the step whose boundary this is
  std::uint64_t body_bytes = 0;  // the schedule from the current layout on (--schedule syntax)
};
void send_job_sync(comm::Transport& world, int to, const JobSync& msg, const std::string& body);
// From world rank 0. sleep_poll: test every 10 ms instead of blocking inside MPI (ranks that
// may wait for many steps; they are woken a step before they have work).
JobSync receive_job_sync(comm::Transport& world, std::string& body, bool sleep_poll);

}  // namespace dynatrain::job
