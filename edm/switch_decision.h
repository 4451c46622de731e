// Rank 0's decision on a prepared switch, the one message that carries it to the other
// processes of the transition world (DeviceManager's prepare, collective) and, with the
// placement filled in, to the processes a grow starts (they cannot compute it). One line of
// JSON, versioned:
//   {"version":1,"kind":"keep","why":"","may_leave":true,"placement":[1,0,2]}
//   kind       "keep" (the processes stay; a grow adds to them), "shrink" (processes the layout
//              leaves out, or vacated ones, leave) or "refuse" (nothing changes)
//   why        "refuse": the reason; "keep": why processes outside the layout stay, idle ("" when
//              none are left out)
//   may_leave  processes a placement leaves out may leave (the launcher lets them)
//   placement  the process (transition world rank) of every new rank; [] for the identity
// Every process of a job runs the same dynatrain, so another version is refused by name rather
// than read as something else.
#pragma once

#include <string>
#include <vector>

#include "edm/launcher.h"

namespace dynatrain::edm {

inline constexpr int kSwitchDecisionVersion = 1;

struct SwitchDecision {
  enum class Kind { kKeep, kShrink, kRefuse };
  Kind kind = Kind::kKeep;
  std::string why;
  bool may_leave = false;
  std::vector<int> placement;

  bool refused() const { return kind == Kind::kRefuse; }
};

// Rank 0's decision for a prepare that needs `need` more processes (< 0: fewer) beside the
// `alive` ones and vacates the processes `vacate` (ranks of the current world), from what
// `launcher` (nullptr: none, a transport of kind `backend` that cannot start or end processes)
// can do. Refused: processes cannot be started ("cannot start processes: ..."), or a vacated
// one cannot leave ("cannot vacate processes: ...", the launcher's cannot_vacate). Shrink:
// fewer processes or a vacate, when they may leave. Keep otherwise, with why the processes
// left out stay, idle (the launcher's cannot_leave). `keep` (a lend): every process stays, idle
// outside the layout, and may not leave; a vacate is refused. No placement.
SwitchDecision decide_switch(int need, int alive, const std::vector<int>& vacate, const Launcher* launcher,
                             const std::string& backend, bool keep = false);

std::string serialize(const SwitchDecision& d);
// The inverse: InputError for another version ("every process of a job must run the same
// dynatrain"); InvariantError naming the field and what it must be for a malformed message.
SwitchDecision parse_switch_decision(const std::string& wire);

}  // namespace dynatrain::edm
