// `dynatrain train` in the front (tools/torch_binary.h): its line in `dynatrain --help`; run, it
// means no dynatrain-torch sits next to this program (a build without libtorch,
// -DDYNATRAIN_WITH_TORCH=OFF): the trainer's help and flags live there.
#include "common/error.h"
#include "tools/commands.h"
#include "tools/torch_binary.h"

namespace dynatrain::tools {

Command add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", torch_binary_path().empty() ? "Reference trainer (this build has no libtorch)"
                                                                      : "Reference trainer (runs in dynatrain-torch)");
  cmd->allow_extras();
  return [] {
    DT_INPUT_ERROR(
        "this dynatrain has no trainer: dynatrain-torch is not next to it (a build without libtorch; "
        "reconfigure with -DDYNATRAIN_WITH_TORCH=ON)");
    return 2;
  };
}

}  // namespace dynatrain::tools
