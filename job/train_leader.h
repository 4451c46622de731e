// The job's leader in `dynatrain train`: the process holding world rank 0 of the *current*
// world runs the job's I/O: the CSV, the --json switch records, the step and switch lines, the
// summary, and reading requests from --job DIR. The role moves with rank 0: when a commit gives
// rank 0 to another process (a request vacating rank 0, e.g. a whole-job migration), the old
// leader's LeaderState travels in that commit (Trainer::commit's leader_state, broadcast on the
// transition world) and the new leader opens the files in append mode and carries on. Torch-free.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace dynatrain::job {

inline constexpr int kLeaderStateVersion = 1;

struct LeaderState {
  struct Tally {  // steady-state throughput of one layout (first step after a switch excluded)
    double tokens = 0, seconds = 0;
    int steps = 0;
  };
  std::map<std::string, Tally> per_layout;
  nlohmann::json records = nlohmann::json::array();  // one per switch so far (--json)
  double p2p_bytes_per_s = 0;                        // point-to-point bandwidth measured once at the start of the run
  // The schedule from the current layout on, as the schedule hand-over (job/schedule_tail.h,
  // versioned JSON): it holds the requests taken so far and the ranks switches vacate.
  std::string schedule;
  // The scheduler protocol's state (job/job_control.h: JobControl::hand_over): requests
  // accepted and not yet committed, the last switch.
  nlohmann::json control = nlohmann::json::object();

  // JSON: {"version": kLeaderStateVersion, "records", "p2p_bytes_per_s", "schedule",
  // "per_layout": {LAYOUT: [tokens, seconds, steps]}, "control"}.
  std::string serialize() const;
  // The inverse; InputError naming an unknown version (every process of a job must run the
  // same dynatrain), InvariantError when `blob` is not serialize()'s output.
  static LeaderState parse(const std::string& blob);
};

}  // namespace dynatrain::job
