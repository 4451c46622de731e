// Placeholders until exec/ and train/ provide their commands.
#include "common/error.h"
#include "tools/commands.h"

namespace dynatrain::tools {

Command add_run_transition_command(CLI::App& app) {
  app.add_subcommand("run-transition", "Execute a switch on real processes (not built yet)");
  return [] { DT_INPUT_ERROR("run-transition is not built yet"); return 2; };
}

Command add_train_command(CLI::App& app) {
  app.add_subcommand("train", "Reference trainer (not built yet)");
  return [] { DT_INPUT_ERROR("train is not built yet"); return 2; };
}

}  // namespace dynatrain::tools
