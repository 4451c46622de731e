// This process's own command, for processes a grow starts running the same program.
#pragma once

#include <string>
#include <vector>

namespace dynatrain::edm {

// This process's arguments after argv[0], as the kernel recorded them (/proc/self/cmdline).
std::vector<std::string> own_arguments();

// The executable this process runs (/proc/self/exe), "" when it cannot be read.
std::string self_executable();

}  // namespace dynatrain::edm
