// The wave agreement: every rank's per-key load and net growth, gathered from all ranks, and the
// cut of the key sequence into waves (exec/README.md: waves). Every rank cuts the same gathered
// stats with the same function, so all ranks agree on every key's wave without a coordinator.
//
// The engine gathers the stats over its transport (one all_gather) and cuts them itself. A
// caller that runs every rank's engine as a thread of one process (the simulator's tracer,
// sim/trace.h) passes one SharedWaveAgreement instead (TransitionOptions::shared_waves): the
// stats are held once, not once per rank, and each order is cut once. Same functions, same cut.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "exec/engine.h"

namespace dynatrain::exec {

// All ranks' per-key stats. A key is one (expert group, kind, tensor, slab) of the engine's key
// space; load = bytes the rank reads from its source + writes to its destination at that key,
// net = written - read. values[(r * keys + k) * 2] is the load, [... + 1] the net.
struct WaveStats {
  int world = 0;
  std::size_t keys = 0;
  std::vector<float> values;

  float load(int r, std::size_t k) const { return values[(static_cast<std::size_t>(r) * keys + k) * 2]; }
  float net(int r, std::size_t k) const { return values[(static_cast<std::size_t>(r) * keys + k) * 2 + 1]; }
};

// The wave of every key (index = key) and the number of waves (0 when there are no keys).
struct WaveCut {
  std::vector<int> wave_of_key;
  int waves = 0;
};

// The order in which `order` visits the keys. kBalanced merges the ascending and the
// descending sequence (see the definition).
std::vector<std::size_t> key_sequence(const WaveStats& stats, WaveOrder order);

// Cuts the key sequence of `order` into waves: a new wave starts before a key that would push
// some rank's wave load past mem_budget / 16.
WaveCut cut_waves(const WaveStats& stats, WaveOrder order, std::size_t mem_budget);

// One wave agreement shared by all ranks of one switch that run as threads of one process.
// Protocol per rank: contribute(own row), a barrier on the transport (every row is in), then
// cut() as often as needed. Thread-safe; the cut of each (order, budget) is computed once.
// One object serves one switch: each rank contributes once and gives each step once.
class SharedWaveAgreement {
 public:
  // `mine` is the rank's 2 * keys floats (load, net per key); every rank gives the same world
  // and key count (InvariantError otherwise).
  void contribute(int rank, int world, const std::vector<float>& mine);
  std::shared_ptr<const WaveCut> cut(WaveOrder order, std::size_t mem_budget);

  // The engine's other agreement steps (tensor count, slab rows, wave order) are element-wise
  // maxima over ranks. Protocol per rank and step: give_max, a barrier, max_of. Every rank of a
  // step gives the same number of values (InvariantError otherwise).
  void give_max(int step, int rank, int world, const std::vector<double>& mine);
  std::vector<double> max_of(int step);

 private:
  struct Max {
    std::vector<double> values;
    std::vector<char> given;  // per rank
  };
  std::mutex mu_;
  WaveStats stats_;
  std::vector<char> given_;  // per rank: its row is in
  std::map<std::pair<int, std::size_t>, std::shared_ptr<const WaveCut>> cuts_;
  std::map<int, Max> maxes_;  // per step
};

}  // namespace dynatrain::exec
