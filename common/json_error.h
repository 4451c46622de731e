// The part of a JSON parser's message a user can act on, for one-line errors (docs/errors.md):
// "[json.exception.parse_error.101] parse error at line 1, column 19: syntax error while parsing
// object - unexpected end of input; expected '}'" -> "line 1, column 19: unexpected end of input;
// expected '}'". Other messages pass through, cut to at most 120 characters.
#pragma once

#include <string>

namespace dynatrain {

inline std::string brief_json_error(const std::string& what) {
  std::string s = what;
  if (const auto at = s.find(" at line "); at != std::string::npos)
    s = s.substr(at + 4);
  else if (const auto close = s.find("] "); s.rfind("[json.", 0) == 0 && close != std::string::npos)
    s = s.substr(close + 2);
  const auto colon = s.find(": "), dash = s.find(" - ");
  if (colon != std::string::npos && dash != std::string::npos && dash > colon)
    s = s.substr(0, colon + 2) + s.substr(dash + 3);
  constexpr std::size_t kMax = 120;
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return s;
}

}  // namespace dynatrain
