// The `dynatrain` subcommands. Each registers its flags on a CLI11 subcommand and returns the
// function that runs it (exit code: 0 ok, 1 a check failed, 2 bad input). docs/cli.md lists all.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace dynatrain::tools {

using Command = std::function<int()>;

Command add_plan_command(CLI::App& app);
Command add_run_transition_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_request_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_launch_command(CLI::App& app);

// The engine's schedule flags, shared by run-transition and simulate (the simulator traces the
// engine, so both take the same values; exec::TransitionOptions::overlap_links, rounds_in_flight).
inline void add_link_schedule_options(CLI::App* cmd, std::string& overlap_links, int& rounds_in_flight) {
  cmd->add_option("--overlap-links", overlap_links,
                  "One pipeline per link class, so a rank keeps an intra-node and an inter-node round in "
                  "flight at once: auto (when the ranks span nodes), on (run-transition on one host: nodes "
                  "of --gpus-per-node ranks), off (one pipeline: the order before link classes)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--rounds-in-flight", rounds_in_flight,
                  "Rounds each rank keeps in flight per link class (0: 2 intra-node, 8 inter-node); chunks "
                  "shrink so staging stays within half the budget")
      ->capture_default_str();
}

}  // namespace dynatrain::tools
