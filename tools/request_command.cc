// `dynatrain request`: asks a running `dynatrain train --job DIR` job to switch layout.
#include "tools/commands.h"
#include "tools/job_request.h"

namespace dynatrain::tools {

Command add_request_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto req = std::make_shared<JobRequest>();
  auto* cmd = app.add_subcommand("request", "Ask a running train --job DIR job to switch layout");
  cmd->add_option("--job", *dir, "The job's directory (train --job DIR)")->required();
  cmd->add_option("--to", req->to, "Layout to switch to, e.g. tp=2,dp=4")->required();
  cmd->add_option("--at-step", req->at_step, "Step before which to switch (default: as soon as prepared)");
  cmd->add_option("--vacate", req->vacate,
                  "World ranks that must hold nothing afterwards and leave, e.g. 1,3 (not 0); "
                  "processes are started for the ranks they held");
  return [dir, req] {
    write_job_request(*dir, *req);
    std::printf("request: %s -> %s%s%s\n", dir->c_str(), req->to.c_str(),
                req->at_step >= 0 ? (" at step " + std::to_string(req->at_step)).c_str() : "",
                req->vacate.empty() ? "" : (", vacating ranks " + req->vacate).c_str());
    return 0;
  };
}

}  // namespace dynatrain::tools
