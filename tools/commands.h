// The `dynatrain` subcommands. Each registers its flags on a CLI11 subcommand and returns the
// function that runs it (exit code: 0 ok, 1 a check failed, 2 bad input). README.md (CLI) lists all.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace dynatrain::tools {

using Command = std::function<int()>;

Command add_plan_command(CLI::App& app);
Command add_run_transition_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_request_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);

}  // namespace dynatrain::tools
