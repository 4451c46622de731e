#include "job/train_leader.h"

#include "common/error.h"

namespace dynatrain::job {

std::string LeaderState::serialize() const {
  nlohmann::json j;
  j["version"] = kLeaderStateVersion;
  j["control"] = control;
  j["records"] = records;
  j["p2p_bytes_per_s"] = p2p_bytes_per_s;
  j["schedule"] = schedule;
  nlohmann::json tallies = nlohmann::json::object();
  for (const auto& [layout, t] : per_layout) tallies[layout] = {t.tokens, t.seconds, t.steps};
  j["per_layout"] = tallies;
  return j.dump();
}

LeaderState LeaderState::parse(const std::string& blob) {
  LeaderState s;
  try {
    const auto j = nlohmann::json::parse(blob);
    const int version = j.at("version").get<int>();
    if (version != kLeaderStateVersion)
      DT_INPUT_ERROR("leader state version ", version,
                     " handed over in a commit is not supported; this process reads version ", kLeaderStateVersion,
                     " (every process of a job must run the same dynatrain)");
    s.control = j.value("control", nlohmann::json::object());
    s.records = j.at("records");
    s.p2p_bytes_per_s = j.at("p2p_bytes_per_s").get<double>();
    s.schedule = j.at("schedule").get<std::string>();
    for (const auto& [layout, t] : j.at("per_layout").items())
      s.per_layout[layout] = Tally{t.at(0).get<double>(), t.at(1).get<double>(), t.at(2).get<int>()};
  } catch (const nlohmann::json::exception& e) {
    DT_CHECK(false, "malformed leader state handed over in a commit: ", e.what());
  }
  return s;
}

}  // namespace dynatrain::job
