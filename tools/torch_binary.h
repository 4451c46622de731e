// The `dynatrain` front and its libtorch sibling. Loading libtorch costs a process 0.6-0.7 s on
// start (its operator registry, hundreds of shared libraries), which plan, run-transition,
// simulate, request, export and launch never use. So `dynatrain` is built without it and runs
// those itself; `train`, and any command in a world the environment names (RANK and WORLD_SIZE
// without mpirun: that world runs over torch.distributed's c10d), run in `dynatrain-torch`, built
// next to it with every command. The front replaces itself with the sibling (execv: the same
// process, pid, arguments and environment) before it parses a flag or starts MPI; the sibling
// names its process `dynatrain` again (prctl), so `pgrep -x dynatrain` and ps see one name.
#pragma once

#include <string>

namespace dynatrain::tools {

// dynatrain-torch in this program's directory; "" when there is none (a build without libtorch).
std::string torch_binary_path();

// Whether the command line and environment need the libtorch sibling (see above).
bool needs_torch_binary(int argc, char** argv);

// Replaces this process with the sibling, same arguments. Returns only when that failed: the
// line it printed names the path and the reason; the exit code to end with.
int run_in_torch_binary(const std::string& path, char** argv);

}  // namespace dynatrain::tools
