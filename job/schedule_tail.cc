#include "job/schedule_tail.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "job/job_request.h"
#include "job/train_job.h"

namespace dynatrain::job {

namespace {

// A vacate entry of the hand-over: "all" (kVacateAll), "keep" (kKeepProcesses: a lend), or an
// array of world ranks (>= 0), as the "1,3" the job keeps.
bool is_word(const std::string& entry) { return entry == kVacateAll || entry == kKeepProcesses; }

std::string vacate_list(const std::string& step, const nlohmann::json& ranks) {
  if (ranks.is_string() && is_word(ranks.get<std::string>())) return ranks.get<std::string>();
  std::string list;
  const bool ok = ranks.is_array() && !ranks.empty() &&
                  std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.is_number_unsigned(); });
  if (!ok)
    DT_INPUT_ERROR("malformed schedule hand-over: \"vacate\" of step ", step, " is ", ranks.dump(),
                   "; valid: \"all\", \"keep\" or an array of world ranks (integers >= 0)");
  for (const auto& r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r.get<unsigned>());
  return list;
}

}  // namespace

std::string encode_schedule_tail(const vps::ParallelConfig& current,
                                 const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                                 std::size_t next, const std::map<std::int64_t, std::string>& vacate_at) {
  std::string s = "0:" + current.str();
  nlohmann::json vacate = nlohmann::json::object();
  for (std::size_t i = next; i < schedule.size(); ++i) {
    s += ";" + std::to_string(schedule[i].first) + ":" + schedule[i].second.str();
    if (const auto it = vacate_at.find(schedule[i].first); it != vacate_at.end())
      vacate[std::to_string(it->first)] =
          is_word(it->second) ? nlohmann::json(it->second) : nlohmann::json(parse_rank_list(it->second));
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
      vacate_at[at] = vacate_list(step, ranks);
    }
  } catch (const nlohmann::json::exception& e) {
    DT_INPUT_ERROR("malformed schedule hand-over: ", e.what());
  } catch (const std::logic_error&) {
    DT_INPUT_ERROR("malformed schedule hand-over: a vacate step is not a number");
  }
}

}  // namespace dynatrain::job
