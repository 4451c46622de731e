#include "job/progress_record.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace dynatrain::job {

namespace {

constexpr const char* kStepEvent = "step";
constexpr const char* kNoticedEvent = "every_process_noticed";

// The field `name` of a record, of the type T; InputError naming it when missing or another type.
template <typename T>
T field(const nlohmann::json& j, const char* name, const std::string& line) {
  if (!j.contains(name))
    DT_INPUT_ERROR("progress record '", line, "' has no field \"", name, "\" (version ", kProgressVersion,
                   " records have it)");
  try {
    return j.at(name).get<T>();
  } catch (const nlohmann::json::exception&) {
    DT_INPUT_ERROR("progress record '", line, "': field \"", name, "\" is ", j.at(name).dump(), ", of the wrong type");
  }
}

}  // namespace

bool progress_records_wanted() {
  const char* v = std::getenv(kProgressEnv);
  if (!v) return false;
  if (std::strcmp(v, std::to_string(kProgressVersion).c_str()) != 0)
    DT_INPUT_ERROR(kProgressEnv, "='", v, "' asks for progress records of a version this dynatrain does not write; it ",
                   "writes version ", kProgressVersion, " (every process of a job must run the same dynatrain)");
  return true;
}

std::string progress_line(const ProgressRecord& r) {
  nlohmann::json j = {{"version", kProgressVersion}};
  if (r.event == ProgressRecord::Event::kStep) {
    j["event"] = kStepEvent;
    j["step"] = r.step;
    j["processes"] = r.processes;
    j["layout"] = r.layout;
  } else {
    j["event"] = kNoticedEvent;
    j["signal"] = r.signal;
  }
  return kProgressPrefix + j.dump();
}

void write_progress(const ProgressRecord& r) {
  if (!progress_records_wanted()) return;
  std::printf("%s\n", progress_line(r).c_str());
  std::fflush(stdout);
}

std::optional<ProgressRecord> parse_progress_line(const std::string& line) {
  const std::size_t at = line.find(kProgressPrefix);
  if (at == std::string::npos) return std::nullopt;
  const std::string text = line.substr(at + std::strlen(kProgressPrefix));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) DT_INPUT_ERROR("progress record '", text, "' is not a JSON object");
  const int version = field<int>(j, "version", text);
  if (version != kProgressVersion)
    DT_INPUT_ERROR("progress record version ", version, " is not supported; this supervisor reads version ",
                   kProgressVersion, " (every process of a job must run the same dynatrain)");
  ProgressRecord r;
  const std::string event = field<std::string>(j, "event", text);
  if (event == kStepEvent) {
    r.step = field<std::int64_t>(j, "step", text);
    r.processes = field<int>(j, "processes", text);
    r.layout = field<std::string>(j, "layout", text);
    if (r.step < 0 || r.processes < 1)
      DT_INPUT_ERROR("progress record '", text, "': step ", r.step, " and processes ", r.processes,
                     " must be >= 0 and >= 1");
  } else if (event == kNoticedEvent) {
    r.event = ProgressRecord::Event::kEveryProcessNoticed;
    r.signal = field<std::string>(j, "signal", text);
  } else {
    DT_INPUT_ERROR("progress record '", text, "': event \"", event, "\" is not one of \"", kStepEvent, "\", \"",
                   kNoticedEvent, "\"");
  }
  return r;
}

}  // namespace dynatrain::job
