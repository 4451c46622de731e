// The trainer's progress as data for its supervisor (job/supervisor.h): rank 0 of a supervised
// job writes one versioned JSON record per completed step, and one when every process has
// notice, on its stdout (the one channel mpirun carries back from any host), each on a line of
// its own that starts with kProgressPrefix. The supervisor takes these lines out of the output
// it passes through and learns the attempt's last step, its processes, its layout and whether it
// ended on a notice to all from them alone: the human step line ("step N  loss ...") and the
// notice line may change freely. A job not started by a supervisor writes no records.
//
//   {"version":1,"event":"step","step":N,"processes":P,"layout":"tp=2,pp=1,dp=2,zero=1"}
//   {"version":1,"event":"every_process_noticed","signal":"SIGTERM"}
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dynatrain::job {

inline constexpr int kProgressVersion = 1;
// Set by the supervisor for the job it starts, to the record version it reads.
inline constexpr const char* kProgressEnv = "DT_PROGRESS_RECORDS";
// Starts every record line: ASCII RS, then a name no human line starts with.
inline constexpr const char* kProgressPrefix =
    "\x1e"
    "dynatrain-progress ";

struct ProgressRecord {
  enum class Event { kStep, kEveryProcessNoticed };
  Event event = Event::kStep;
  std::int64_t step = -1;  // kStep: the step completed
  int processes = 0;       // kStep: the job's processes in it
  std::string layout;      // kStep: its layout (vps::ParallelConfig::str())
  std::string signal;      // kEveryProcessNoticed: the notice signal's name
};

// Whether this process writes records: kProgressEnv is set (by a supervisor). InputError naming
// the value when it asks for a version other than kProgressVersion (the supervisor and the job
// must run the same dynatrain).
bool progress_records_wanted();

// The record's line, without the newline: kProgressPrefix, then one line of JSON.
std::string progress_line(const ProgressRecord& r);

// Writes the record's line on stdout (and flushes) when progress_records_wanted().
void write_progress(const ProgressRecord& r);

// The record of a line, or nothing when the line is not a record (no kProgressPrefix). A line
// that is one but does not read: InputError naming the version ("every process of a job must
// run the same dynatrain") or the field that is missing or of the wrong type.
std::optional<ProgressRecord> parse_progress_line(const std::string& line);

}  // namespace dynatrain::job
