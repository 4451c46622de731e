// parse_schedule (declared in job/train_job.h): kept apart from the trainer so that it builds
// without libtorch (fuzz/fuzz_schedule.cc).
//
// Grammar: ENTRY(;ENTRY)*, ENTRY = STEP:CONFIG, STEP = decimal digits only (no sign, no spaces),
// the first 0, strictly increasing. An empty entry (";;", a leading or trailing ';') and a space
// anywhere in a STEP are refused, never skipped: a typo must not silently drop a switch.
#include <charconv>
#include <limits>

#include "common/error.h"
#include "job/train_job.h"

namespace dynatrain::job {

namespace {

constexpr const char* kExample = "e.g. --schedule \"0:tp=2,pp=2,dp=2;50:dp=8\"";

std::vector<std::string> split_entries(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(';', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

std::int64_t parse_step(const std::string& item, const std::string& digits) {
  std::int64_t step = -1;
  const char* end = digits.data() + digits.size();
  const bool only_digits = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
  const auto [ptr, ec] = std::from_chars(digits.data(), end, step);
  if (!only_digits || ec != std::errc() || ptr != end)
    DT_INPUT_ERROR("schedule entry '", item, "': '", digits,
                   "' is not a step number; give decimal digits only "
                   "(no sign or spaces), up to ",
                   std::numeric_limits<std::int64_t>::max());
  return step;
}

}  // namespace

std::vector<std::pair<std::int64_t, vps::ParallelConfig>> parse_schedule(const std::string& text) {
  if (text.find_first_not_of(" \t;") == std::string::npos) DT_INPUT_ERROR("empty schedule; ", kExample);
  std::vector<std::pair<std::int64_t, vps::ParallelConfig>> out;
  const std::vector<std::string> items = split_entries(text);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    if (item.find_first_not_of(" \t") == std::string::npos)
      DT_INPUT_ERROR("schedule entry ", i + 1, " of ", items.size(), " is empty (';' at an end or twice in a row); ",
                     kExample);
    const auto colon = item.find(':');
    if (colon == std::string::npos) DT_INPUT_ERROR("schedule entry '", item, "' must be STEP:CONFIG; ", kExample);
    const std::int64_t step = parse_step(item, item.substr(0, colon));
    if (out.empty() && step != 0) DT_INPUT_ERROR("schedule must start at step 0, got '", item, "'");
    if (!out.empty() && step <= out.back().first)
      DT_INPUT_ERROR("schedule steps must increase: '", item, "' after step ", out.back().first);
    out.emplace_back(step, vps::ParallelConfig::parse(item.substr(colon + 1)));
  }
  return out;
}

}  // namespace dynatrain::job
