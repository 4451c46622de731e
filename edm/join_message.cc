#include "edm/join_message.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "edm/message_fields.h"

namespace dynatrain::edm {

namespace {

using Json = nlohmann::json;

using message::is_count;
using message::is_counts;
using message::is_string;

const Json& field(const Json& header, const char* name, bool (*ok)(const Json&), const char* what) {
  return message::field(header, "join message", name, ok, what);
}

}  // namespace

std::string serialize(const JoinMessage& m) {
  const Json header = {{"version", kJoinMessageVersion},
                       {"current", m.current},
                       {"next", m.next},
                       {"next_id", m.next_id},
                       {"ids", m.ids}};
  return header.dump() + '\n' + m.payload;
}

JoinMessage parse_join_message(const std::string& wire) {
  const std::size_t end = std::min(wire.find('\n'), wire.size());
  const Json header = Json::parse(wire.substr(0, end), nullptr, false);
  DT_CHECK(end < wire.size() && header.is_object(), "malformed join message from rank 0: its first line (", end,
           " bytes) is not a JSON object");
  const auto version = field(header, "version", is_count, "an integer").get<std::uint64_t>();
  if (version != kJoinMessageVersion)
    DT_INPUT_ERROR("join message version ", version, " is not supported; this process reads version ",
                   kJoinMessageVersion, " (every process of a job must run the same dynatrain)");
  JoinMessage m;
  m.current = field(header, "current", is_string, "a config string").get<std::string>();
  m.next = field(header, "next", is_string, "a config string").get<std::string>();
  m.next_id = field(header, "next_id", is_count, "a process id (an integer >= 0)").get<ProcessId>();
  m.ids = field(header, "ids", is_counts, "an array of process ids (integers >= 0)").get<std::vector<ProcessId>>();
  m.payload = wire.substr(end + 1);
  return m;
}

}  // namespace dynatrain::edm
