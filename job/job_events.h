// DIR/events.jsonl of a `dynatrain train --job DIR` job: one JSON object a line, appended and
// flushed as things happen, for a scheduler to follow (`tail -F`). Every line carries
//   {"v": 1, "time": "2026-12-01T23:50:00.123Z", "unix": 1764633000.123, "event": NAME, ...}
// Events (docs/edm.md lists their fields): job_started, request_accepted, request_refused,
// request_superseded, switch_prepared, switch_committed, switch_refused, notice,
// process_lost, recovery, leader_moved, job_ended.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace dynatrain::job {

inline constexpr int kEventsVersion = 1;

// This process is the job's leader: events go to DIR/events.jsonl (appended; created if
// missing). `listener` (optional) sees every event after it is written (the status file).
void open_event_log(const std::string& dir, std::function<void(const nlohmann::json&)> listener = {});
void close_event_log();

// Appends one event (thread-safe; a no-op in a process that holds no event log, so any code may
// call it: a preemption notice, a lost process, a recovery). `fields` is a JSON object merged
// into the line. A failed write warns once on stderr and the job goes on.
void record_event(const std::string& event, const nlohmann::json& fields = nlohmann::json::object());

// The events other parts of the job report, with their fields named once:
// a preemption notice for a process (`seconds` left, -1 unknown; `what`: its source),
void record_notice(int rank, double seconds, const std::string& what);
// a process lost without notice (pid -1 unknown),
void record_process_lost(int rank, long pid, const std::string& what);
// the job going on after a loss (a restart or a recovery switch) at `step`.
void record_recovery(std::int64_t step, const std::string& layout, int processes, const std::string& how);

}  // namespace dynatrain::job
