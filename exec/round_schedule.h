// The round schedule: the order in which one rank exchanges its chunks with its peers.
//
// XOR pairwise order: in a wave, step s = 1 .. 2^ceil(log2 W) - 1 pairs rank i with peer i ^ s
// (peers >= W and pairs with nothing in the wave skipped); a pair exchanges rounds r = 0 ..
// max(#send chunks, #recv chunks) - 1, round r carrying chunk r of each direction. Pairs are
// symmetric, so both ranks of a pair list their common rounds at the same place of one global
// order of all rounds: (wave, step, round), or with two link classes (wave, fraction of the
// class's steps, class, step, round), a key both ranks compute from what they share. A rank
// that waits for its rounds in its sequence order, having posted every round up to the one it
// waits for, can therefore never deadlock (exec/README.md, "Two link classes").
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "comm/transport.h"
#include "exec/chunking.h"
#include "exec/engine.h"

namespace dynatrain::exec {

// The nodes of the ranks and whether the schedule runs one pipeline per link class (LinkOverlap):
// class 0 is a pair on one node, class 1 a pair across nodes. Every rank computes the same
// answer from the same global facts (Transport::node_of, TransitionOptions::topology).
struct LinkClasses {
  std::vector<int> node;  // per rank: its node; all 0 with one class
  int classes = 1;        // 2: one pipeline per link class
  int node_steps = 1;     // 2^ceil(log2(most ranks on one node)): the intra-node XOR steps

  // 0: `me` and `peer` share a node; 1: they talk over the network (always 0 with one class).
  int of(int me, int peer) const { return node[peer] != node[me] ? 1 : 0; }
};
LinkClasses choose_link_classes(const comm::Transport& transport, LinkOverlap mode, const plan::Topology& topology);

// Rounds in flight per link class (TransitionOptions::rounds_in_flight; 0: kAutoRoundsInFlight),
// 0 for a class the schedule does not run. InputError for a value outside 0 .. kMaxRoundsInFlight.
std::array<int, 2> rounds_in_flight(int requested, int classes);

struct Round {
  int wave = 0, peer = 0;
  std::size_t round = 0;
  int cls = 0;         // link class of the pair (LinkClasses::of)
  int step = 0;        // XOR step: peer = rank ^ step
  std::size_t of = 1;  // rounds of the pair in this wave (the same on both ranks)
};

// This rank's exchange sequence over `work`: waves in order, XOR steps, rounds of each pair;
// with two link classes the rounds of a wave merged by the classes' fractions.
std::vector<Round> build_rounds(const WaveWork& work, int me, int world, const LinkClasses& links);

}  // namespace dynatrain::exec
