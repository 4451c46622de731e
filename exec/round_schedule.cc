#include "exec/round_schedule.h"

#include <algorithm>
#include <map>

#include "common/error.h"

namespace dynatrain::exec {

LinkClasses choose_link_classes(const comm::Transport& t, LinkOverlap mode, const plan::Topology& topology) {
  const int W = t.size();
  LinkClasses out;
  out.node.assign(static_cast<std::size_t>(W), 0);
  if (mode == LinkOverlap::kOff) return out;
  auto spans = [&] { return std::any_of(out.node.begin(), out.node.end(), [&](int n) { return n != out.node[0]; }); };
  for (int r = 0; r < W; ++r) out.node[r] = t.node_of(r);
  if (!spans() && mode == LinkOverlap::kOn)
    for (int r = 0; r < W; ++r) out.node[r] = topology.node_of(r);
  if (!spans()) {
    out.node.assign(static_cast<std::size_t>(W), 0);
    return out;
  }
  out.classes = 2;
  std::map<int, int> per_node;
  int most = 1;
  for (int n : out.node) most = std::max(most, ++per_node[n]);
  while (out.node_steps < most) out.node_steps <<= 1;
  return out;
}

std::array<int, 2> rounds_in_flight(int n, int classes) {
  if (n < 0 || n > kMaxRoundsInFlight)
    DT_INPUT_ERROR("rounds in flight ", n, " is not valid; give 0 (auto: ", kAutoRoundsInFlight[0], " on one node, ",
                   kAutoRoundsInFlight[1], " per link class across nodes) or 1 to ", kMaxRoundsInFlight);
  return {n > 0 ? n : kAutoRoundsInFlight[0], classes == 1 ? 0 : n > 0 ? n : kAutoRoundsInFlight[1]};
}

namespace {

// Two link classes: the rounds of a wave are ordered by a key that both ranks of a pair
// compute alike, from the wave, the XOR step s, the pair's class, the round r and the pair's
// round count n, so the rank's sequence still follows one global order of all rounds. Within a
// wave each class's steps are laid evenly over [0, 1) — intra-node steps s in [1, node_steps),
// inter-node steps s in [node_steps, steps) on node-contiguous ranks — step s taking
// [s - lo, s - lo + 1) / (hi - lo) and its round r the point (r + 1/2) / n of that interval; the
// rounds are merged by that fraction (ties: intra-node first, then step, then round). So a
// rank's intra-node and inter-node rounds alternate in proportion to their numbers, and both
// classes end together. Pairs outside those ranges (nodes not contiguous) clamp to [0, 1]:
// still one global order.
void merge_link_classes(std::vector<Round>& rounds, int steps, int node_steps) {
  auto fraction = [&](const Round& rd) {
    const double lo = rd.cls == 0 ? 1 : node_steps, hi = rd.cls == 0 ? node_steps : steps;
    const double at = rd.step - lo + (static_cast<double>(rd.round) + 0.5) / static_cast<double>(rd.of);
    return hi > lo ? std::clamp(at / (hi - lo), 0.0, 1.0) : 0.0;
  };
  std::stable_sort(rounds.begin(), rounds.end(), [&](const Round& a, const Round& b) {
    if (a.wave != b.wave) return a.wave < b.wave;
    const double fa = fraction(a), fb = fraction(b);
    if (fa != fb) return fa < fb;
    return a.cls < b.cls;  // then step and round: the stable order they were built in
  });
}

}  // namespace

std::vector<Round> build_rounds(const WaveWork& work, int me, int W, const LinkClasses& links) {
  std::vector<Round> rounds;
  int steps = 1;
  while (steps < W) steps <<= 1;
  for (int w = 0; w < static_cast<int>(work.size()); ++w)
    for (int s = 1; s < steps; ++s) {
      const int peer = me ^ s;
      auto it = peer < W ? work[w].find(peer) : work[w].end();
      if (it == work[w].end()) continue;
      const std::size_t n = std::max(it->second.send.size(), it->second.recv.size());
      for (std::size_t r = 0; r < n; ++r) rounds.push_back({w, peer, r, links.of(me, peer), s, n});
    }
  if (links.classes == 2) merge_link_classes(rounds, steps, links.node_steps);
  return rounds;
}

}  // namespace dynatrain::exec
