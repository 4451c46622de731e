// The job directory (`train --job DIR`, job/job_status.h) of a supervised job (job/supervisor.h)
// across its attempts: one live job from the first attempt's start to the supervisor's return.
//   * Between two attempts the supervisor holds DIR: job.lock names it, status.json says
//     "restarting" with a heartbeat, so `request` places requests for the restarted attempt,
//     whose leader takes DIR over with what the failed one had queued and accepted
//     (job/job_control.h: JobControl::start).
//   * When the supervisor ends after a failed attempt (no restart left, or none possible), it
//     answers every queued and accepted request (refused, with the reason), marks the status
//     "ended" with the exit code, records job_ended and removes job.lock.
#pragma once

#include <memory>
#include <string>

#include "job/job_status.h"

namespace dynatrain::job {

class SupervisorHold {
 public:
  // Holds DIR from now on ("" : nothing): job.lock names this process, status.json "restarting";
  // its heartbeat (a StatusFile's) is renewed until the attempt's leader takes DIR or the hold
  // is destroyed.
  explicit SupervisorHold(const std::string& dir);
  SupervisorHold(const SupervisorHold&) = delete;
  SupervisorHold& operator=(const SupervisorHold&) = delete;

 private:
  std::unique_ptr<StatusFile> status_;
};

// After the last attempt failed with `exit_code` ("" dir: nothing). `why`: one line for the answers.
void end_supervised_job_dir(const std::string& dir, int exit_code, const std::string& why);

}  // namespace dynatrain::job
