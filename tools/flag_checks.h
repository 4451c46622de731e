// Flag values checked after CLI11 parsed them, before any work: each message names the flag,
// the value and the valid range (docs/errors.md rule 1). Negative or zero values are refused,
// never silently replaced by a default; sizes are bounded so later products cannot overflow.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/error.h"

namespace dynatrain::tools {

inline void require_int_in(const char* flag, std::int64_t value, std::int64_t lo, std::int64_t hi,
                           const char* note = "") {
  if (value < lo || value > hi)
    DT_INPUT_ERROR(flag, " ", value, " is out of range; valid: ", lo, "..", hi, note);
}

inline void require_positive_finite(const char* flag, double value, double hi) {
  if (!std::isfinite(value) || value <= 0 || value > hi)
    DT_INPUT_ERROR(flag, " ", value, " is not valid; give a positive finite number up to ", hi);
}

}  // namespace dynatrain::tools
