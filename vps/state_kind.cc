#include "vps/state_kind.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace dynatrain::vps {
namespace {

std::string valid_names() {
  std::string s;
  for (const auto& k : kStateKinds) s += std::string(s.empty() ? "" : ", ") + k.name;
  return s;
}

}  // namespace

const char* state_kind_name(StateKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < kStateKinds.size() ? kStateKinds[i].name : "?";
}

std::string bytes_per_parameter(const ElemBytes& elem) {
  int total = 0;
  std::string parts;
  for (const auto& k : kStateKinds) {
    const int b = elem[static_cast<int>(k.kind)];
    total += b;
    parts += std::string(parts.empty() ? "" : ", ") + k.name + " " + std::to_string(b);
  }
  return std::to_string(total) + " bytes per parameter (" + parts + ")";
}

std::vector<StateKind> parse_state_kinds(const std::string& text) {
  std::vector<StateKind> kinds;
  if (text == "all" || text == "optimizer") {
    for (const auto& k : kStateKinds)
      if (text == "all" || k.optimizer_state) kinds.push_back(k.kind);
    return kinds;
  }
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto it =
        std::find_if(kStateKinds.begin(), kStateKinds.end(), [&](const StateKindInfo& k) { return item == k.name; });
    if (it == kStateKinds.end())
      DT_INPUT_ERROR("unknown state kind '", item, "'; valid: ", valid_names(), ", or 'all', 'optimizer'");
    if (std::find(kinds.begin(), kinds.end(), it->kind) == kinds.end()) kinds.push_back(it->kind);
  }
  if (kinds.empty()) DT_INPUT_ERROR("empty state kind list; valid: ", valid_names());
  std::sort(kinds.begin(), kinds.end());
  return kinds;
}

}  // namespace dynatrain::vps
