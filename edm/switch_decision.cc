#include "edm/switch_decision.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "edm/message_fields.h"

namespace dynatrain::edm {

namespace {

using Json = nlohmann::json;

constexpr const char* kKinds[] = {"keep", "shrink", "refuse"};

bool is_kind(const Json& v) {
  return v.is_string() && std::find(std::begin(kKinds), std::end(kKinds), v.get<std::string>()) != std::end(kKinds);
}

const Json& field(const Json& j, const char* name, bool (*ok)(const Json&), const char* what) {
  return message::field(j, "switch decision", name, ok, what);
}

}  // namespace

SwitchDecision decide_switch(int need, int alive, const std::vector<int>& vacate, const Launcher* launcher,
                             const std::string& backend, bool keep) {
  const std::size_t vacated = vacate.size();
  SwitchDecision d;
  std::string reason, note;
  if (need > 0)
    reason = launcher ? launcher->cannot_start(need, alive)
                      : "cannot start processes: the " + backend + " transport has no launcher";
  // Without a launcher nobody leaves (ranks outside the layout wait, as in a fixed job).
  if (need < 0 && launcher) note = keep ? "lent (kept for a later switch)" : launcher->cannot_leave();
  if (keep && vacated > 0) reason = "a switch that keeps its processes vacates none";
  if (reason.empty() && vacated > 0) {
    std::string why = launcher ? std::string() : "the transport has no launcher";
    for (std::size_t i = 0; why.empty() && i < vacated; ++i) why = launcher->cannot_vacate(vacate[i]);
    if (!why.empty()) reason = "cannot vacate processes: " + why;
  }
  // Shrink also when vacated processes all sit beyond the layout (an identity placement:
  // nobody else moves, the world keeps its lowest ranks and the vacated ones leave).
  const bool shrink = (need < 0 || vacated > 0) && launcher && note.empty();
  d.kind = !reason.empty() ? SwitchDecision::Kind::kRefuse
                           : (shrink ? SwitchDecision::Kind::kShrink : SwitchDecision::Kind::kKeep);
  d.why = !reason.empty() ? reason : note;
  // Where a placement orders the next world, processes it leaves out may go.
  d.may_leave = !keep && launcher && launcher->cannot_leave().empty();
  return d;
}

std::string serialize(const SwitchDecision& d) {
  return Json{{"version", kSwitchDecisionVersion},
              {"kind", kKinds[static_cast<int>(d.kind)]},
              {"why", d.why},
              {"may_leave", d.may_leave},
              {"placement", d.placement}}
      .dump();
}

SwitchDecision parse_switch_decision(const std::string& wire) {
  const Json j = Json::parse(wire, nullptr, false);
  DT_CHECK(j.is_object(), "malformed switch decision from rank 0: '", wire.substr(0, 80), "' is not a JSON object");
  const auto version = field(j, "version", message::is_count, "an integer").get<std::uint64_t>();
  if (version != kSwitchDecisionVersion)
    DT_INPUT_ERROR("switch decision version ", version, " is not supported; this process reads version ",
                   kSwitchDecisionVersion, " (every process of a job must run the same dynatrain)");
  SwitchDecision d;
  const std::string kind = field(j, "kind", is_kind, "\"keep\", \"shrink\" or \"refuse\"").get<std::string>();
  d.kind =
      static_cast<SwitchDecision::Kind>(std::find(std::begin(kKinds), std::end(kKinds), kind) - std::begin(kKinds));
  d.why = field(j, "why", message::is_string, "a string").get<std::string>();
  d.may_leave = field(j, "may_leave", message::is_bool, "true or false").get<bool>();
  d.placement =
      field(j, "placement", message::is_counts, "an array of process ranks (integers >= 0)").get<std::vector<int>>();
  return d;
}

}  // namespace dynatrain::edm
