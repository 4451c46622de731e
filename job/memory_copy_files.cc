#include "job/memory_copy_files.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "ckpt/checkpoint.h"

namespace dynatrain::job {

namespace {

std::mutex g_mu;
std::set<std::string> g_last, g_before;  // the names of the last two copies (both directories)

}  // namespace

void note_memory_copy_files(std::set<std::string> names) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_before = std::move(g_last);
  g_last = std::move(names);
}

void drop_memory_copy_of_this_process() {
  const char* dir = std::getenv(kMemoryCopyDirEnv);
  if (!dir) return;
  std::set<std::string> names;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    names = g_last;
    names.insert(g_before.begin(), g_before.end());
  }
  std::error_code ec;
  for (const std::string& step : ckpt::step_dirs(dir))
    for (const std::string& name : names) std::filesystem::remove(std::filesystem::path(dir) / step / name, ec);
}

}  // namespace dynatrain::job
