#include "job/job_status.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "job/job_files.h"
#include "job/mpi_world.h"

namespace dynatrain::job {

namespace {

constexpr double kGoneAfterS = 3 * kHeartbeatS;  // a pid gone this long: not a leader hand-over

std::optional<nlohmann::json> read_json(const std::string& path) {
  std::string why;
  const auto text = read_regular_file(path, 1 << 20, why);
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

// A running process: a zombie has exited (a job's leader stays one for a moment after mpirun
// has returned, until it is reaped), so it holds nothing.
bool pid_exists(long pid) { return pid > 0 && !process_gone(pid); }

// The leader job.lock (or status.json) names runs, or runs on another host (not known here).
bool leader_runs(const std::string& dir) {
  const auto status = read_json(dir + "/status.json").value_or(nlohmann::json::object());
  const auto lock = read_json(dir + "/job.lock").value_or(status.value("leader", nlohmann::json::object()));
  return lock.value("host", "") != host_name() || pid_exists(lock.value("pid", -1L));
}

}  // namespace

double stale_after_seconds() {
  const char* v = std::getenv("DT_JOB_STALE_S");
  if (!v || !*v) return kStaleAfterS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !std::isfinite(s) || s <= 0)
    DT_INPUT_ERROR("DT_JOB_STALE_S='", v, "' is not valid; give a positive number of seconds (default ", kStaleAfterS,
                   ")");
  return s;
}

std::string why_no_live_job(const std::string& dir, double stale_after_s) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "'" + dir + "' does not exist";
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is " + file_kind(st.st_mode) + ", not a job directory";
  const auto status = read_json(dir + "/status.json").value_or(nlohmann::json::object());
  if (status.value("health", "") == "ended")
    return "the job ended (exit code " + std::to_string(status.value("exit_code", -1)) + ")";
  // A job.lock removed under a live job: its status.json names the leader too.
  const auto lock = read_json(dir + "/job.lock").value_or(status.value("leader", nlohmann::json::object()));
  if (!lock.contains("pid")) return "no job holds it (no readable job.lock; start one with train --job " + dir + ")";
  const long pid = lock.value("pid", -1L);
  const std::string host = lock.value("host", "");
  const double beat = std::max(lock.value("started_unix", 0.0), status.value("heartbeat_unix", 0.0));
  const double age = unix_now() - beat;
  if (host == host_name() && !pid_exists(pid) && age > kGoneAfterS)
    return "its process " + std::to_string(pid) + " on " + host + " is gone";
  if (age > stale_after_s)
    return "its heartbeat is " + std::to_string(static_cast<long>(age)) + " s old (process " + std::to_string(pid) +
           " on " + host +
           (host == host_name() && pid_exists(pid)
                ? " runs: hung, or it cannot write " + dir + "/status.json (is its file system full?))"
                : ")");
  return "";
}

void require_live_job(const std::string& dir) {
  // A leader gone a moment ago is a hand-over (its successor takes the lock) or a death (the
  // heartbeat ages past kGoneAfterS): wait until it is one or the other.
  const auto t0 = Clock::now();
  std::string why = why_no_live_job(dir);
  while (why.empty() && !leader_runs(dir) && seconds_since(t0) < 2 * kGoneAfterS) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    why = why_no_live_job(dir);
  }
  if (why.empty() && !leader_runs(dir)) why = "its leader's process is gone and no other took its place";
  if (!why.empty()) DT_INPUT_ERROR("no live job holds '", dir, "': ", why);
}

nlohmann::json read_status(const std::string& dir) {
  return read_json(dir + "/status.json").value_or(nlohmann::json::object());
}

bool held_by_supervisor(const std::string& dir) {
  const char* supervisor = std::getenv(kSupervisorPidEnv);
  const auto lock = read_json(dir + "/job.lock");
  return supervisor && lock && lock->value("host", "") == host_name() &&
         std::to_string(lock->value("pid", -1L)) == supervisor;
}

std::string hold_job_dir(const std::string& dir, bool take_over) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
    return "job directory '" + dir + "' is not a writable directory";
  // A lock whose process on this host is gone is a dead job's, without the hand-over grace (a
  // supervisor restarting the job may come back within it).
  const auto old = read_json(dir + "/job.lock");
  const bool dead_here = old && old->value("host", "") == host_name() && !pid_exists(old->value("pid", -1L));
  if (!take_over && !dead_here && !held_by_supervisor(dir) && why_no_live_job(dir).empty())
    return "job directory '" + dir + "' is held by another live job (its job.lock); give each job its own --job DIR";
  for (const char* sub : {"/requests", "/answers"}) {
    std::filesystem::create_directories(dir + sub, ec);
    if (!std::filesystem::is_directory(dir + sub, ec)) return "cannot create '" + dir + sub + "' (a directory)";
  }
  const nlohmann::json lock = {{"version", kStatusVersion},
                               {"pid", static_cast<long>(getpid())},
                               {"host", host_name()},
                               {"started_unix", unix_now()}};
  // The old status says "ended" when the directory held a job before: replaced at once.
  if (!take_over)
    write_file_atomically(dir + "/status.json",
                          nlohmann::json{{"version", kStatusVersion},
                                         {"health", "starting"},
                                         {"leader", {{"pid", static_cast<long>(getpid())}, {"host", host_name()}}},
                                         {"heartbeat_unix", unix_now()}}
                              .dump(),
                          false);
  if (!write_file_atomically(dir + "/job.lock", lock.dump() + "\n", true)) return "cannot write '" + dir + "/job.lock'";
  return "";
}

void release_job_dir(const std::string& dir) {
  const auto lock = read_json(dir + "/job.lock");
  if (lock && lock->value("pid", -1L) == static_cast<long>(getpid()) && lock->value("host", "") == host_name())
    std::remove((dir + "/job.lock").c_str());
}

bool write_status(const std::string& dir, nlohmann::json& status) {
  const double now = unix_now();
  status["heartbeat_unix"] = now;
  status["updated"] = iso_time(now);
  return write_file_atomically(dir + "/status.json", status.dump(2) + "\n", false);
}

StatusFile::StatusFile(std::string dir, nlohmann::json initial, std::function<bool()> beating)
    : dir_(std::move(dir)), beating_(std::move(beating)), status_(std::move(initial)) {
  thread_ = std::thread([this] { heartbeat(); });
}

StatusFile::~StatusFile() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void StatusFile::update(const std::function<void(nlohmann::json&)>& edit, bool now) {
  std::lock_guard<std::mutex> g(mu_);
  edit(status_);
  if (now || unix_now() - last_write_ >= kHeartbeatS) write_locked();
}

nlohmann::json StatusFile::snapshot() const {
  std::lock_guard<std::mutex> g(mu_);
  return status_;
}

void StatusFile::write_locked() {
  last_write_ = unix_now();
  const bool written = write_status(dir_, status_);
  if (!written && !write_failed_)  // said once; said again after a write that works
    std::fprintf(stderr,
                 "dynatrain: warning: cannot write '%s/status.json' (%s); the job goes on, but `dynatrain request` "
                 "takes it for dead once its heartbeat is %g s old\n",
                 dir_.c_str(), std::strerror(errno), stale_after_seconds());
  write_failed_ = !written;
}

void StatusFile::heartbeat() {
  std::unique_lock<std::mutex> g(mu_);
  while (!stop_) {
    if (stop_cv_.wait_for(g, std::chrono::duration<double>(kHeartbeatS), [this] { return stop_; })) break;
    if (status_.value("health", "") != "ended" && (!beating_ || beating_())) write_locked();
  }
}

}  // namespace dynatrain::job
