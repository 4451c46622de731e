// Node-level fan-out: a plan-level transform that sends bytes several processes of one node
// need across the network once, passes them on inside the node, and, where one source feeds many
// nodes, passes them from node to node by a binomial tree instead of from the source each time.
//
// A relay group is every destination process on one node that receives the same (tensor, kind,
// box) from another node (a DP grow: each new replica on node B pulls the same bytes from node
// A). One of them, the relay, keeps its receive; the others get the box from the relay inside
// the node. A tree group is, after that, one source process sending the same (tensor, kind,
// box) to R >= 2 processes on other nodes (each a relay or a node's only receiver: a grow from
// dp=1, where one replica feeds every new node). The source sends to one of them in stage 1;
// in every later network stage each holder (every receiver so far, and the source if its
// destination holds the box) sends to one that lacks it, the source last, so the holders double
// each stage: ceil(log2(R + 1)) network stages, the source's network copies fall from R to at
// most that. The switch runs as a list of stages, each one call of exec::run_transition:
//
//   stage 1      the plan without the relayed receives and the tree's later hops (each relay
//                group's box crosses the network once, into the relay; each tree group's box
//                goes from the source to its first receiver); elsewhere the box's place is a hole
//   stages 2..   a switch from the destination layout to itself, run in place
//                (exec::TransitionOptions::in_place: every buffer stays where it is, nothing is
//                copied): every process keeps, as identity keeps, every segment it receives
//                nothing into in that stage (whole, as one piece) and, in a segment it receives
//                into, exactly the boxes other stages write there; it sends boxes an earlier
//                stage wrote into exactly that segment of its destination buffer. The tree's
//                network stages come first; the last stage (when there are relay groups) is
//                every relay's sends inside its node.
//
// Contract (check_fanout proves it for given stages): every stage after the first alone is an
// exact cover of the destination layout by itself (check_plan with the destination on both
// sides) with identity keeps; every box it sends was written into exactly that segment of the
// sender by an earlier stage; and stage 1 plus every later receive, traced back through earlier
// stages to the real holder it came from, is an exact cover of the destination from real holders
// (check_plan). Together: a later stage reads only what earlier stages wrote, and every
// destination element is written once.
//
// The relay of a group is its member that relays the fewest bytes so far (in and out; ties
// rotate with the tensor id), so relays spread over a node's processes (and, one NIC per GPU,
// its NICs). A tree's receivers are ordered by process; the first gets the box from the source.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/checker.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::plan {

class Planner;

// kOff: one stage, the plan as planned. kOn: relay every relay group, send every tree group by
// its tree. kAuto: a tree group takes its tree when its own estimate (network stages x its
// bytes over `inter` + the extra stages' fixed cost) beats R copies of it through the source's
// `inter`; then the whole is applied when the cost rule (FanoutCosts) predicts that the stages
// finish sooner than the one plan.
enum class FanoutMode : std::uint8_t { kOff, kAuto, kOn };
// "off", "auto" or "on"; InputError naming the valid choices otherwise.
FanoutMode parse_fanout_mode(const std::string& text);
const char* fanout_mode_name(FanoutMode mode);

// The rates the rule weighs (bytes/s per direction; seconds). The defaults describe an
// A800-class node (plan::Bandwidth's defaults: NVLink-class port, one 200 Gb/s NIC per GPU).
struct FanoutCosts {
  double intra = 150e9;         // one process's link inside a node
  double inter = 25e9;          // one process's path to the network (its PCIe / NIC share)
  double node_inter = 200e9;    // a node's NICs together
  double stage_seconds = 2e-3;  // each later engine call's fixed cost (agreement, latency)
};

struct FanoutPlan {
  bool applied = false;  // false: `stages` is the plan as planned, one stage
  // stages[s][p]: process p's plan in stage s. stages[0] moves from the source layout to the
  // destination; every later stage runs the destination layout to itself, in place.
  std::vector<std::vector<RankPlan>> stages;
  std::uint64_t groups = 0;           // relay groups found (boxes with >= 2 receivers on a node)
  std::uint64_t relayed_pieces = 0;   // receives moved from the network into the last stage
  std::uint64_t relayed_bytes = 0;    // their bytes: what no longer crosses the network
  std::uint64_t tree_candidates = 0;  // boxes one source sends to >= 2 other nodes (after relaying)
  std::uint64_t tree_groups = 0;      // of those, sent by a tree in `stages` (0 when not applied)
  std::uint64_t tree_bytes = 0;       // their hops sent by a receiver, not the source: its bytes saved
  // Bytes crossing nodes (counted once, on the receiving side; zeroed kinds excluded), all stages.
  std::uint64_t inter_node_bytes_without = 0, inter_node_bytes = 0;
  // The busiest process's bytes sent to other nodes, all stages together (a tree lowers it).
  std::uint64_t max_sender_bytes_without = 0, max_sender_bytes = 0;
  double seconds_without = 0, seconds_with = 0;  // the rule's estimates (FanoutCosts)
  std::string reason;                            // one line: what was decided and why
};

// Splits `plans` (Planner::plan_all of `planner`: every process, in process order) into stages. `elem_bytes`: element size per state kind; `zeroed_kinds`: kinds the engine does not
// move (exec::TransitionOptions::zeroed_kinds), never relayed nor counted. Pure and
// deterministic: every process computes the same stages from the same inputs. `trees` false:
// relay groups only (what the tree adds, for comparison: bench/fanout/fanout_rule.cc).
FanoutPlan plan_fanout(const Planner& planner, const std::vector<RankPlan>& plans, const vps::ElemBytes& elem_bytes,
                       FanoutMode mode, const FanoutCosts& costs = {}, std::uint32_t zeroed_kinds = 0,
                       bool trees = true);

// Bytes `plan`'s process receives from other nodes (zeroed kinds excluded).
std::uint64_t inter_node_bytes_in(const RankPlan& plan, const Topology& topology, const vps::ElemBytes& elem_bytes,
                                  std::uint32_t zeroed_kinds = 0);

// Bytes `plan`'s process sends to other nodes (zeroed kinds excluded).
std::uint64_t inter_node_bytes_out(const RankPlan& plan, const Topology& topology, const vps::ElemBytes& elem_bytes,
                                   std::uint32_t zeroed_kinds = 0);

// Proves the contract above for any number of stages (every process's plan in each). One stage
// (not applied) reduces to check_plan(stages[0]).
CheckResult check_fanout(const vps::Layout& src, const vps::Layout& dst,
                         const std::vector<std::vector<RankPlan>>& stages, const SwitchPlacement& placement = {});

}  // namespace dynatrain::plan
