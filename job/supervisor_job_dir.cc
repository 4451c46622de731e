#include "job/supervisor_job_dir.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "job/job_events.h"
#include "job/job_files.h"
#include "job/job_request.h"
#include "job/job_status.h"

namespace dynatrain::job {

namespace {

nlohmann::json this_process() { return {{"pid", static_cast<long>(getpid())}, {"host", host_name()}}; }

void write_status(const std::string& dir, nlohmann::json status) {
  status["heartbeat_unix"] = unix_now();
  status["updated"] = iso_time(status["heartbeat_unix"]);
  write_file_atomically(dir + "/status.json", status.dump(2) + "\n", false);
}

void answer_refused(const std::string& id, const std::string& dir, const std::string& why) {
  if (id.empty()) return;
  write_answer(dir, Answer{id, AnswerState::kRefused, -1, "", why, {}});
  record_event("request_refused", {{"request", id}, {"reason", why}});
}

}  // namespace

SupervisorHold::SupervisorHold(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  nlohmann::json lock = this_process();
  lock["version"] = kStatusVersion;
  lock["started_unix"] = unix_now();
  lock["restarting"] = true;
  write_file_atomically(dir_ + "/job.lock", lock.dump() + "\n", true);
  nlohmann::json status = read_status(dir_);
  status["health"] = "restarting";
  status["leader"] = this_process();
  status.erase("exit_code");
  write_status(dir_, status);
  thread_ = std::thread([this] { heartbeat(); });
}

SupervisorHold::~SupervisorHold() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void SupervisorHold::heartbeat() {
  while (!stop_ && held_by_supervisor(dir_)) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kHeartbeatS / 4));
    const nlohmann::json status = read_status(dir_);
    if (!stop_ && held_by_supervisor(dir_) && unix_now() - status.value("heartbeat_unix", 0.0) >= kHeartbeatS)
      write_status(dir_, status);
  }
}

void end_supervised_job_dir(const std::string& dir, int exit_code, const std::string& why) {
  if (dir.empty()) return;
  nlohmann::json status = read_status(dir);
  if (status.value("health", "") == "ended" && !held_by_supervisor(dir)) return;  // its leader ended it
  open_event_log(dir);
  for (const auto& t : take_requests(dir)) answer_refused(t.id, dir, why + " before taking it");
  for (const auto& p : status.value("pending_requests", nlohmann::json::array()))
    answer_refused(p.value("request", ""), dir, why);
  record_event("job_ended", {{"exit_code", exit_code}, {"error", why}});
  close_event_log();
  status["health"] = "ended";
  status["exit_code"] = exit_code;
  status["pending_requests"] = nlohmann::json::array();
  write_status(dir, status);
  std::remove((dir + "/job.lock").c_str());
}

}  // namespace dynatrain::job
