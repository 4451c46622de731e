// Flag values checked after CLI11 parsed them, before any work: each message names the flag,
// the value and the valid range (docs/errors.md rule 1). Negative or zero values are refused,
// never silently replaced by a default; sizes are bounded so later products cannot overflow.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

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

// A CLI11 check (`->check(whole_number_in<T>(lo, hi))`) that a flag's text is a decimal whole
// number in [lo, hi], rewritten to its plain digits. CLI11 2.1 alone reads "-1" into an unsigned
// flag as 2^64 - 1, clamps "99999999999999999999" to the largest int64, and reads "010" as octal.
template <typename T>
CLI::Validator whole_number_in(T lo, T hi) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || ptr != end || value < lo || value > hi)
          return "'" + text + "' is not a whole number in " + range;
        text = std::to_string(value);
        return {};
      },
      "INT in " + range);
}

}  // namespace dynatrain::tools
