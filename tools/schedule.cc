// parse_schedule (declared in tools/train_cli.h): kept apart from the trainer so that it builds
// without libtorch (fuzz/fuzz_schedule.cc).
#include <sstream>

#include "common/error.h"
#include "tools/train_cli.h"

namespace dynatrain::tools {

std::vector<std::pair<std::int64_t, vps::ParallelConfig>> parse_schedule(const std::string& text) {
  std::vector<std::pair<std::int64_t, vps::ParallelConfig>> out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ';')) {
    if (item.find_first_not_of(" \t") == std::string::npos) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos)
      DT_INPUT_ERROR("schedule entry '", item, "' must be STEP:CONFIG, e.g. 0:tp=2,pp=2,dp=2");
    std::int64_t step = 0;
    try {
      std::size_t used = 0;
      step = std::stoll(item.substr(0, colon), &used);
      if (used != colon) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      DT_INPUT_ERROR("schedule entry '", item, "': '", item.substr(0, colon), "' is not a step number");
    }
    if (out.empty() && step != 0) DT_INPUT_ERROR("schedule must start at step 0, got '", item, "'");
    if (!out.empty() && step <= out.back().first)
      DT_INPUT_ERROR("schedule steps must increase: '", item, "' after step ", out.back().first);
    out.emplace_back(step, vps::ParallelConfig::parse(item.substr(colon + 1)));
  }
  if (out.empty()) DT_INPUT_ERROR("empty schedule; e.g. --schedule \"0:tp=2,pp=2,dp=2;50:dp=8\"");
  return out;
}

}  // namespace dynatrain::tools
