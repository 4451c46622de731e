// What a scheduler reads to watch a `dynatrain train --job DIR` job, and the liveness marker
// that `dynatrain request` checks before it places a request (docs/edm.md, "Driving a job from
// a scheduler").
//
//   DIR/job.lock     {"version":1,"pid":P,"host":H,"started_unix":T}: the leader (world rank 0)
//                    holding DIR; rewritten by a new leader, removed when the job ends.
//   DIR/status.json  replaced atomically (temporary name + rename) at step boundaries (at most
//                    once a second), at every event, and once a second by a heartbeat thread:
//                    step, layout, processes, health, last switch, pending requests and
//                    "heartbeat_unix".
// A job is live when job.lock (or, when the lock was removed, status.json's "leader") names it,
// status.json is not "ended", its heartbeat is younger
// than stale_after_seconds() and, on the lock's host, its pid runs (not a zombie; a pid gone for
// more than 3 heartbeats: dead; the grace covers a leader hand-over). `train --job DIR` takes a
// directory whose lock names a pid gone or a zombie at once (a supervisor's restart can find the
// previous leader not yet reaped).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace dynatrain::job {

inline constexpr int kStatusVersion = 1;      // of job.lock and status.json
inline constexpr double kHeartbeatS = 1.0;    // status.json's heartbeat period
inline constexpr double kStaleAfterS = 30.0;  // default of DT_JOB_STALE_S

// A heartbeat older than this many seconds means the job is gone: DT_JOB_STALE_S (a positive
// number; default kStaleAfterS). InputError naming a bad value.
double stale_after_seconds();

// "" when a live job holds DIR; otherwise one line saying why not ("DIR is not a directory",
// "no job holds it (no job.lock)", "the job ended (exit code 0)", "process 123 on HOST is gone",
// "its heartbeat is 41 s old").
std::string why_no_live_job(const std::string& dir, double stale_after_s = stale_after_seconds());
// InputError "no live job holds 'DIR': WHY" (why_no_live_job). A leader whose process is gone
// within the hand-over grace is waited for (at most 2 x 3 heartbeats): taken over, or dead.
void require_live_job(const std::string& dir);

// Set by the supervisor (job/supervisor.h) for the job it starts: its pid. Between two attempts
// the supervisor holds DIR (job.lock names it); the next attempt's leader takes it over with
// the requests that were queued or accepted (job/job_control.h).
inline constexpr const char* kSupervisorPidEnv = "DT_SUPERVISOR_PID";
// DIR/job.lock names this job's supervisor ($DT_SUPERVISOR_PID on this host).
bool held_by_supervisor(const std::string& dir);
// DIR/status.json as written last (an empty object when missing or unreadable).
nlohmann::json read_status(const std::string& dir);

// The leader takes DIR: creates DIR/requests and DIR/answers, writes DIR/job.lock naming this
// process. Returns "" or why it cannot (DIR is not a writable directory; another live job
// holds it, unless `take_over`: a new leader of the same job; or this job's supervisor holds it
// between two attempts).
std::string hold_job_dir(const std::string& dir, bool take_over);
// Removes DIR/job.lock when it names this process.
void release_job_dir(const std::string& dir);

// Stamps `status` with the heartbeat (now: "heartbeat_unix", "updated") and replaces
// DIR/status.json with it atomically; false when the write failed (errno says why).
bool write_status(const std::string& dir, nlohmann::json& status);

// DIR/status.json, owned by the leader (or by the supervisor between two attempts:
// job/supervisor_job_dir.h). A heartbeat thread rewrites it every kHeartbeatS while the status
// is not "ended" and `beating` (when given) returns true; destruction stops it at once.
class StatusFile {
 public:
  explicit StatusFile(std::string dir, nlohmann::json initial = {{"version", kStatusVersion}},
                      std::function<bool()> beating = {});
  ~StatusFile();
  StatusFile(const StatusFile&) = delete;
  StatusFile& operator=(const StatusFile&) = delete;
  // Edits the status under its lock, then writes it when `now` or when the last write is
  // kHeartbeatS old. Never throws for a failed write (the job goes on; the next write retries).
  void update(const std::function<void(nlohmann::json&)>& edit, bool now);
  nlohmann::json snapshot() const;

 private:
  void write_locked();
  void heartbeat();
  std::string dir_;
  std::function<bool()> beating_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  nlohmann::json status_;
  double last_write_ = 0;
  bool write_failed_ = false;  // the last write failed (a full file system): said once on stderr
  std::thread thread_;
};

}  // namespace dynatrain::job
