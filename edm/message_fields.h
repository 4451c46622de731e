// Field checks shared by the versioned JSON messages rank 0 sends in a switch
// (edm/switch_decision.h, edm/join_message.h): a malformed message is an InvariantError naming
// the message, the field and what it must be. Every process of a job runs the same dynatrain,
// so such a message is a bug, not user input.
#pragma once

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace dynatrain::edm::message {

using Json = nlohmann::json;

inline bool is_count(const Json& v) { return v.is_number_unsigned(); }  // the parser gives every integer >= 0 this type
inline bool is_string(const Json& v) { return v.is_string(); }
inline bool is_bool(const Json& v) { return v.is_boolean(); }
inline bool is_counts(const Json& v) { return v.is_array() && std::all_of(v.begin(), v.end(), is_count); }

// The field `name` of the message `kind` ("switch decision") if it passes `ok`, else an
// InvariantError "malformed <kind> from rank 0: \"<name>\" must be <what>".
inline const Json& field(const Json& j, const char* kind, const char* name, bool (*ok)(const Json&), const char* what) {
  const auto it = j.find(name);
  DT_CHECK(it != j.end() && ok(*it), "malformed ", kind, " from rank 0: \"", name, "\" must be ", what);
  return *it;
}

}  // namespace dynatrain::edm::message
