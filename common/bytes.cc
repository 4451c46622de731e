#include "common/bytes.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <utility>

#include "common/error.h"

namespace dynatrain {

std::uint64_t parse_bytes(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) DT_INPUT_ERROR("byte size '", text, "' must start with a number, e.g. 256MiB, 1GB or 4096");
  std::string suffix = text.substr(digits);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::pair<const char*, std::uint64_t> kUnits[] = {{"", 1},
                                                                 {"b", 1},
                                                                 {"kib", 1ull << 10},
                                                                 {"mib", 1ull << 20},
                                                                 {"gib", 1ull << 30},
                                                                 {"tib", 1ull << 40},
                                                                 {"k", 1ull << 10},
                                                                 {"m", 1ull << 20},
                                                                 {"g", 1ull << 30},
                                                                 {"kb", 1000ull},
                                                                 {"mb", 1000000ull},
                                                                 {"gb", 1000000000ull},
                                                                 {"tb", 1000000000000ull}};
  for (const auto& [name, scale] : kUnits) {
    if (suffix != name) continue;
    std::uint64_t count = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, count);
    if (ec != std::errc() || end != text.data() + digits || count > kMaxBytes / scale)
      DT_INPUT_ERROR("byte size '", text, "' is too large; the largest is 1 EiB (", kMaxBytes, " bytes)");
    return count * scale;
  }
  DT_INPUT_ERROR("byte size '", text, "' has unknown unit '", text.substr(digits),
                 "'; valid units: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB");
}

std::string format_bytes(double bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kNames[unit]);
  return buf;
}

}  // namespace dynatrain
