// Node-level fan-out: a plan-level transform that sends bytes several processes of one node
// need across the network once, and passes them on inside the node.
//
// A relay group is every destination process on one node that receives the same (tensor, kind,
// box) from another node (a DP grow: each new replica on node B pulls the same bytes from node
// A). One of them, the relay, keeps its receive; the others get the box from the relay inside
// the node. The switch then runs as two stages, two calls of exec::run_transition:
//
//   stage 1  the plan without the relayed receives (each group's box crosses the network once,
//            into the relay); on every other process the box's place is a hole
//   stage 2  a switch from the destination layout to itself: every process keeps what stage 1
//            wrote, as identity keeps (whole segments as one piece each where it can), and
//            each relay sends its box to the others of its group from its destination buffer;
//            the engine runs it in place (exec::TransitionOptions::in_place): every buffer
//            stays where it is, nothing is copied
//
// Contract (check_fanout proves it for given plans): stage 1 plus the relayed pieces, each
// traced back to the source that feeds its relay, is an exact cover of the destination from
// real holders (check_plan); stage 2 is an exact cover of the destination layout by itself
// (check_plan with the destination on both sides), its keeps are identities (same buffer,
// segment and box), and every box a relay sends is one that stage 1 wrote into exactly that
// segment of the relay. Together: stage 2's keeps read only what stage 1 wrote.
//
// The relay of a group is its member that relays the fewest bytes so far (in and out; ties
// rotate with the tensor id), so relays spread over a node's processes (and, one NIC per GPU,
// its NICs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/checker.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::plan {

class Planner;

// kOff: one stage, the plan as planned. kOn: relay every group. kAuto: relay when the cost rule
// (FanoutCosts) predicts that the two stages finish sooner than the one.
enum class FanoutMode : std::uint8_t { kOff, kAuto, kOn };
// "off", "auto" or "on"; InputError naming the valid choices otherwise.
FanoutMode parse_fanout_mode(const std::string& text);
const char* fanout_mode_name(FanoutMode mode);

// The rates the rule weighs (bytes/s per direction; seconds). The defaults describe an
// A800-class node (plan::Bandwidth's defaults: NVLink-class port, one 200 Gb/s NIC per GPU).
struct FanoutCosts {
  double intra = 150e9;           // one process's link inside a node
  double inter = 25e9;            // one process's path to the network (its PCIe / NIC share)
  double node_inter = 200e9;      // a node's NICs together
  double stage_seconds = 2e-3;    // the second engine call's fixed cost (agreement, latency)
};

struct FanoutPlan {
  bool applied = false;                 // false: run `stage1` alone (stage2 is empty)
  std::vector<RankPlan> stage1, stage2; // one per process, in process order
  std::uint64_t groups = 0;             // relay groups found (boxes with >= 2 receivers on a node)
  std::uint64_t relayed_pieces = 0;     // receives moved from the network into stage 2
  std::uint64_t relayed_bytes = 0;      // their bytes: what no longer crosses the network
  // Bytes crossing nodes (counted once, on the receiving side; zeroed kinds excluded).
  std::uint64_t inter_node_bytes_without = 0, inter_node_bytes = 0;
  double seconds_without = 0, seconds_with = 0;  // the rule's estimates (FanoutCosts)
  std::string reason;                   // one line: what was decided and why
};

// Splits `plans` (Planner::plan_all of `planner`: every process, in process order) into the two
// stages. `elem_bytes`: element size per state kind; `zeroed_kinds`: kinds the engine does not
// move (exec::TransitionOptions::zeroed_kinds), never relayed nor counted. Pure and
// deterministic: every process computes the same stages from the same inputs.
FanoutPlan plan_fanout(const Planner& planner, const std::vector<RankPlan>& plans,
                       const vps::ElemBytes& elem_bytes, FanoutMode mode, const FanoutCosts& costs = {},
                       std::uint32_t zeroed_kinds = 0);

// Bytes `plan`'s process receives from other nodes (zeroed kinds excluded).
std::uint64_t inter_node_bytes_in(const RankPlan& plan, const Topology& topology, const vps::ElemBytes& elem_bytes,
                                  std::uint32_t zeroed_kinds = 0);

// Proves the contract above for two stages (every process's plan in both). Stage 2 must be
// given for every process; an empty stage 2 (not applied) reduces to check_plan(stage1).
CheckResult check_fanout(const vps::Layout& src, const vps::Layout& dst, const std::vector<RankPlan>& stage1,
                         const std::vector<RankPlan>& stage2, const SwitchPlacement& placement = {});

}  // namespace dynatrain::plan
