#include "job/supervisor_job_dir.h"

#include <unistd.h>

#include <cstdio>

#include "job/job_control.h"
#include "job/job_events.h"
#include "job/job_files.h"
#include "job/job_request.h"
#include "job/job_status.h"

namespace dynatrain::job {

namespace {

nlohmann::json this_process() { return {{"pid", static_cast<long>(getpid())}, {"host", host_name()}}; }

}  // namespace

SupervisorHold::SupervisorHold(const std::string& dir) {
  if (dir.empty()) return;
  nlohmann::json lock = this_process();
  lock["version"] = kStatusVersion;
  lock["started_unix"] = unix_now();
  lock["restarting"] = true;
  write_file_atomically(dir + "/job.lock", lock.dump() + "\n", true);
  nlohmann::json status = read_status(dir);
  status["health"] = "restarting";
  status["leader"] = this_process();
  status.erase("exit_code");
  status_ = std::make_unique<StatusFile>(dir, status, [dir] { return held_by_supervisor(dir); });
  status_->update([](nlohmann::json&) {}, true);
}

void end_supervised_job_dir(const std::string& dir, int exit_code, const std::string& why) {
  if (dir.empty()) return;
  nlohmann::json status = read_status(dir);
  if (status.value("health", "") == "ended" && !held_by_supervisor(dir)) return;  // its leader ended it
  open_event_log(dir);
  for (const auto& t : take_requests(dir)) refuse_request(dir, t.id, why + " before taking it");
  for (const auto& p : status.value("pending_requests", nlohmann::json::array()))
    refuse_request(dir, p.value("request", ""), why);
  record_event("job_ended", {{"exit_code", exit_code}, {"error", why}});
  close_event_log();
  status["health"] = "ended";
  status["exit_code"] = exit_code;
  status["pending_requests"] = nlohmann::json::array();
  write_status(dir, status);
  std::remove((dir + "/job.lock").c_str());
}

}  // namespace dynatrain::job
