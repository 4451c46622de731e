// A cluster description: the machines a switch runs on, as the planner's topology, the
// link-aware lower bound (sim/link_bound.h) and, next, the switch-time simulator need them.
//
// Model (docs/cluster.md states the assumptions behind each preset):
//   - `nodes` nodes of `gpus_per_node` GPUs; process p runs on GPU p % gpus_per_node of node
//     p / gpus_per_node (plan::Topology).
//   - inside a node every GPU has its own link port (NVLink; shared memory on this machine) of
//     `gpu_link` bytes/s per direction;
//   - between nodes a GPU reaches its NIC over PCIe (`pcie` bytes/s per direction, its own);
//     `nics_per_node` NICs of `nic` bytes/s per direction each serve gpus_per_node /
//     nics_per_node GPUs, which share it;
//   - every message pays a latency (`intra_latency` or `inter_latency` seconds);
//   - local copies (pack, unpack, keep) run at `copy` bytes/s.
// Rates are in bytes per second, GB = 1e9 bytes in files and printouts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/plan.h"
#include "plan/stats.h"

namespace dynatrain::sim {

struct Cluster {
  std::string name;
  std::string origin;     // "preset", "measured", or the JSON file it was read from
  int nodes = 1;          // 0: as many as the job needs
  int gpus_per_node = 8;  // 0: every process of the job on one node
  double gpu_link = 0;    // bytes/s per GPU per direction inside a node
  int nics_per_node = 1;
  double nic = 0;            // bytes/s per NIC per direction
  double pcie = 0;           // bytes/s per GPU per direction between the GPU and its NIC
  double intra_latency = 0;  // seconds per message inside a node
  double inter_latency = 0;  // seconds per message between nodes
  double copy = 0;           // bytes/s of a local copy

  int gpus_per_nic() const { return gpus_per_node / nics_per_node; }
  // The topology for a job of `processes` processes (gpus_per_node 0: all on one node).
  plan::Topology topology(int processes) const;
  // Per-GPU bandwidths with every GPU busy at once: inside a node the GPU's own port; across
  // nodes the smaller of its PCIe link and its share of the NIC.
  plan::Bandwidth bandwidth() const;
  // Throws InputError naming the field when a value is out of range.
  void validate() const;
};

// The names cluster_from_spec accepts besides a path to a JSON file.
std::vector<std::string> cluster_presets();

// A preset name or a path to a JSON file (to_json's format). `this-machine` measures the copy
// rate now (measure_this_machine). Throws InputError naming valid choices or the bad field.
Cluster cluster_from_spec(const std::string& spec);

// One node holding every process; copy rate measured with memcpy on one core, the intra-node
// link taken as half of it (a shared-memory transport copies twice: into a shared segment and
// out of it). No NIC: a one-node cluster has no inter-node traffic.
Cluster measure_this_machine();

nlohmann::json to_json(const Cluster& cluster);
// Every field required, unknown fields rejected (a typo must not silently become a default).
Cluster cluster_from_json(const nlohmann::json& json, const std::string& origin);

}  // namespace dynatrain::sim
