// CLI11 checks for flag values (`->check(...)`), run while the flags are parsed, before any
// work: each message names the flag (CLI11 puts it first: "--steps: ..."), the value and the
// valid range (docs/errors.md rule 1). Negative or zero values are refused, never silently
// replaced by a default; sizes are bounded so later products cannot overflow.
//
// Numbers (docs/cli.md, "Numbers"): an integer flag takes decimal digits, with a leading '-' only
// where its range admits negatives; leading zeros are decimal ("010" is 10). A '+', spaces, a hex
// prefix ("0x10"), an exponent ("1e3"), a fraction or a value beyond the flag's type are refused.
// A real-valued flag takes a decimal number, an exponent allowed ("1e-3"); hex, nan and inf are
// refused.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/error.h"

namespace dynatrain::tools {

// An integer flag's check: the text is a decimal whole number (the rule above) in [lo, hi],
// rewritten to its plain digits, so CLI11's own conversion (which reads "010" as octal, " 5" as
// 5, clamps "99999999999999999999" and wraps "-1" into an unsigned flag) only sees those.
// `note` follows the range in the message, e.g. " (0: auto)".
template <typename T>
CLI::Validator whole_number_in(T lo, T hi, const std::string& note = "") {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range, note](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || ptr != end)
          return "'" + text + "' is not a whole number in " + range + note;
        if (value < lo || value > hi) return text + " is out of range; valid: " + range + note;
        text = std::to_string(value);
        return {};
      },
      "INT in " + range);
}

// A real-valued flag's check: a finite decimal number in (0, hi].
inline CLI::Validator positive_number_up_to(double hi) {
  std::ostringstream bound;
  bound << hi;
  const std::string valid = "give a positive finite number up to " + bound.str();
  return CLI::Validator(
      [hi, valid](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || ptr != end) return "'" + text + "' is not a number; " + valid;
        if (!std::isfinite(value) || value <= 0 || value > hi) return text + " is not valid; " + valid;
        return {};
      },
      "NUMBER in (0, " + bound.str() + "]");
}

// A real-valued flag's check where 0 has a meaning of its own (free, not modelled): a finite
// decimal number in [0, hi]. `meaning` says what to give, e.g. "give 0 (free) or a rate in GB/s";
// the message adds the bound: "-1 is not valid; give 0 (free) or a rate in GB/s (at most 1e+06)".
inline CLI::Validator zero_or_positive_up_to(double hi, const std::string& meaning) {
  std::ostringstream bound;
  bound << hi;
  const std::string valid = meaning + " (at most " + bound.str() + ")";
  return CLI::Validator(
      [hi, valid](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        const bool number = !text.empty() && ec == std::errc() && ptr == end;
        if (!number) return "'" + text + "' is not a number; " + valid;
        return std::isfinite(value) && value >= 0 && value <= hi ? std::string() : text + " is not valid; " + valid;
      },
      "NUMBER in [0, " + bound.str() + "]");
}

// For a value whose check depends on another flag (so it runs after parsing, not as a CLI11
// check): `request --timeout S` is only checked with --wait.
inline void require_positive_finite(const char* flag, double value, double hi) {
  if (!std::isfinite(value) || value <= 0 || value > hi)
    DT_INPUT_ERROR(flag, " ", value, " is not valid; give a positive finite number up to ", hi);
}

}  // namespace dynatrain::tools
