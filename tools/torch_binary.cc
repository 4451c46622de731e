#include "tools/torch_binary.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "job/mpi_world.h"

namespace dynatrain::tools {

std::string torch_binary_path() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const auto sibling = self.parent_path() / "dynatrain-torch";
  return ::access(sibling.c_str(), X_OK) == 0 ? sibling.string() : "";
}

bool needs_torch_binary(int argc, char** argv) {
  return (argc > 1 && std::string_view(argv[1]) == "train") || job::environment_names_world();
}

int run_in_torch_binary(const std::string& path, char** argv) {
  ::execv(path.c_str(), argv);
  std::fprintf(stderr, "dynatrain: error: cannot start %s: %s\n", path.c_str(), std::strerror(errno));
  return 3;
}

}  // namespace dynatrain::tools
