// Switch requests from outside a running job: `dynatrain request --job DIR --to CONFIG
// [--at-step S]` writes DIR/request; a `dynatrain train --job DIR` job takes it (rank 0 reads and
// removes the file at every step boundary, all ranks agree on it) and switches at step S, or
// as soon as the switch can be prepared. How a cluster scheduler tells a job that GPUs came or
// went.
//
// File format (one key a line): "to=CONFIG" and optionally "at_step=S". Written to a temporary
// name and renamed, so the job never reads half a request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dynatrain::tools {

struct JobRequest {
  std::string to;             // config string
  std::int64_t at_step = -1;  // -1: as soon as possible
};

// Validates the config string (InputError) and writes DIR/request (InputError if DIR is not a
// writable directory).
void write_job_request(const std::string& dir, const JobRequest& request);

// Reads and removes DIR/request; nullopt when there is none. A malformed file becomes a request
// whose `to` is the file's text, so that the job refuses it with a message.
std::optional<JobRequest> take_job_request(const std::string& dir);

}  // namespace dynatrain::tools
