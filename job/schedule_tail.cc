#include "job/schedule_tail.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "job/train_job.h"

namespace dynatrain::job {

std::string encode_schedule_tail(const vps::ParallelConfig& current,
                                 const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                                 std::size_t next, const std::map<std::int64_t, std::string>& vacate_at) {
  std::string s = "0:" + current.str();
  nlohmann::json vacate = nlohmann::json::object();
  for (std::size_t i = next; i < schedule.size(); ++i) {
    s += ";" + std::to_string(schedule[i].first) + ":" + schedule[i].second.str();
    if (const auto it = vacate_at.find(schedule[i].first); it != vacate_at.end())
      vacate[std::to_string(it->first)] = it->second;
  }
  return nlohmann::json{{"version", kScheduleTailVersion}, {"schedule", s}, {"vacate", vacate}}.dump();
}

void decode_schedule_tail(const std::string& text, std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                          std::map<std::int64_t, std::string>& vacate_at) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("version") || !j["version"].is_number_integer())
    DT_INPUT_ERROR("malformed schedule hand-over (", text.size(), " bytes): not a versioned JSON object");
  if (const auto v = j["version"].get<long long>(); v != kScheduleTailVersion)
    DT_INPUT_ERROR("schedule hand-over version ", v, " is not supported; this process reads version ",
                   kScheduleTailVersion, " (every process of a job must run the same dynatrain)");
  try {
    schedule = parse_schedule(j.at("schedule").get<std::string>());
    vacate_at.clear();
    for (const auto& [step, ranks] : j.at("vacate").items()) {
      std::size_t used = 0;
      const std::int64_t at = std::stoll(step, &used);
      if (used != step.size()) DT_INPUT_ERROR("malformed schedule hand-over: vacate step '", step, "'");
      vacate_at[at] = ranks.get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    DT_INPUT_ERROR("malformed schedule hand-over: ", e.what());
  } catch (const std::logic_error&) {
    DT_INPUT_ERROR("malformed schedule hand-over: a vacate step is not a number");
  }
}

}  // namespace dynatrain::job
