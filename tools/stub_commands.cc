// Stand-in for `dynatrain train` in builds without libtorch (-DDYNATRAIN_WITH_TORCH=OFF).
#include "common/error.h"
#include "tools/commands.h"

namespace dynatrain::tools {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Reference trainer (this build has no libtorch)");
  cmd->allow_extras();
  return [] {
    DT_INPUT_ERROR("this dynatrain was built without libtorch; reconfigure with -DDYNATRAIN_WITH_TORCH=ON");
    return 2;
  };
}

}  // namespace dynatrain::tools
