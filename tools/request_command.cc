// `dynatrain request`: asks a running `dynatrain train --job DIR` job to switch layout.
#include <limits>

#include "tools/commands.h"
#include "common/error.h"
#include "tools/flag_checks.h"
#include "job/job_request.h"

namespace dynatrain::tools {

Command add_request_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto req = std::make_shared<job::JobRequest>();
  auto* cmd = app.add_subcommand("request", "Ask a running train --job DIR job to switch layout");
  cmd->add_option("--job", *dir, "The job's directory (train --job DIR)")->required();
  auto migrate = std::make_shared<bool>(false);
  cmd->add_option("--to", req->to, "Layout to switch to, e.g. tp=2,dp=4 (with --migrate: default the current one)");
  cmd->add_option("--at-step", req->at_step, "Step before which to switch (default: as soon as prepared)")
      ->check(whole_number_in(std::int64_t{0}, std::numeric_limits<std::int64_t>::max()));
  cmd->add_option("--vacate", req->vacate,
                  "World ranks that must hold nothing afterwards and leave, e.g. 1,3 (0 too: the "
                  "job's leader role moves); processes are started for the ranks they held");
  cmd->add_flag("--migrate", *migrate,
                "Move the whole job onto new processes (vacate every process); the old ones exit");
  return [dir, req, migrate] {
    if (*migrate) {
      if (!req->vacate.empty()) DT_INPUT_ERROR("--migrate vacates every process; drop --vacate ", req->vacate);
      req->vacate = job::kVacateAll;
    }
    job::write_job_request(*dir, *req);
    std::printf("request: %s -> %s%s%s\n", dir->c_str(), req->to.empty() ? "(current layout)" : req->to.c_str(),
                req->at_step >= 0 ? (" at step " + std::to_string(req->at_step)).c_str() : "",
                req->vacate.empty() ? "" : (", vacating ranks " + req->vacate).c_str());
    return 0;
  };
}

}  // namespace dynatrain::tools
