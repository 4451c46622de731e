// dynatrain: plan, execute and train through parallel-layout switches. See README.md (CLI).
#include <cstdio>
#include <exception>
#include <map>

#include "common/error.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"DynaTrain: switch the parallel layout of a training job in memory"};
  app.require_subcommand(1);
  std::map<CLI::App*, dynatrain::tools::Command> commands;
  auto add = [&](dynatrain::tools::Command (*make)(CLI::App&)) {
    const std::size_t before = app.get_subcommands({}).size();
    auto run = make(app);
    commands[app.get_subcommands({}).at(before)] = std::move(run);
  };
  add(dynatrain::tools::add_plan_command);
  add(dynatrain::tools::add_run_transition_command);
  add(dynatrain::tools::add_train_command);
  add(dynatrain::tools::add_export_command);
  add(dynatrain::tools::add_request_command);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "dynatrain: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const dynatrain::InputError& e) {
    std::fprintf(stderr, "dynatrain: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dynatrain: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
