#include "sim/cluster.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/error.h"
#include "common/json_error.h"
#include "common/clock.h"

namespace dynatrain::sim {

namespace {

constexpr double kGB = 1e9;
constexpr double kUs = 1e-6;
constexpr double kMinRate = 1e-3 * kGB, kMaxRate = 1e6 * kGB;  // bytes/s
constexpr double kMaxLatency = 1.0;                            // seconds
constexpr int kMaxNodes = 131072, kMaxGpusPerNode = 1 << 16;

// The presets' assumptions are stated in docs/cluster.md; keep the two in step. 8 GPUs per
// node, one NIC per GPU unless said otherwise, 5 us per message inside a node, 10 us across.
Cluster preset(const char* name, int nodes, double link_gb, int nics, double nic_gb, double pcie_gb, double copy_gb) {
  Cluster c;
  c.name = name;
  c.origin = "preset";
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.gpu_link = link_gb * kGB;
  c.nics_per_node = nics;
  c.nic = nic_gb * kGB;
  c.pcie = pcie_gb * kGB;
  c.intra_latency = 5 * kUs;
  c.inter_latency = 10 * kUs;
  c.copy = copy_gb * kGB;
  return c;
}

// A800: NVLink 400 GB/s bidirectional, 200 Gb/s HDR NICs behind PCIe Gen4 x16 (~25 GB/s
// usable), HBM2e 2 TB/s (a copy reads and writes: 1 TB/s).
Cluster a800(int nics) { return preset(nics == 8 ? "a800-16x8" : "a800-16x8-4nic", 16, 200, nics, 25, 25, 1000); }
// H100 SXM: NVLink 4 900 GB/s bidirectional, 400 Gb/s NDR NICs behind PCIe Gen5 x16 (~50 GB/s
// usable), HBM3 3.35 TB/s (copy 1.5 TB/s). Any number of nodes.
Cluster h100() { return preset("h100-nx8", 0, 450, 8, 50, 50, 1500); }

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& origin) {
  if (!j.contains(key)) DT_INPUT_ERROR("cluster '", origin, "' lacks field \"", key, "\"");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    DT_INPUT_ERROR("cluster '", origin, "': field \"", key, "\" has the wrong type (", j.at(key).dump(), ")");
  }
}

const char* const kFields[] = {
    "name",         "nodes",         "gpus_per_node",    "gpu_link_gb_per_s", "nics_per_node",
    "nic_gb_per_s", "pcie_gb_per_s", "intra_latency_us", "inter_latency_us",  "copy_gb_per_s"};

std::string field_list() {
  std::string out;
  for (const char* f : kFields) out += (out.empty() ? "" : ", ") + std::string(f);
  return out;
}

}  // namespace

plan::Topology Cluster::topology(int processes) const {
  return plan::Topology{gpus_per_node > 0 ? gpus_per_node : std::max(1, processes)};
}

plan::Bandwidth Cluster::bandwidth() const { return plan::Bandwidth{gpu_link, std::min(pcie, nic / gpus_per_nic())}; }

void Cluster::validate() const {
  // Rates between 1 MB/s and 1 PB/s, latencies up to 1 s: beyond them a prediction's times
  // overflow or vanish (1e-300 GB/s), and no real link is there.
  auto positive = [&](double v, const char* what) {
    if (!(v >= kMinRate && v <= kMaxRate))
      DT_INPUT_ERROR("cluster '", name, "': ", what, " must be positive, from ", kMinRate / kGB, " to ", kMaxRate / kGB,
                     " GB/s; got ", v / kGB);
  };
  positive(gpu_link, "gpu_link_gb_per_s");
  positive(nic, "nic_gb_per_s");
  positive(pcie, "pcie_gb_per_s");
  positive(copy, "copy_gb_per_s");
  if (nodes < 0) DT_INPUT_ERROR("cluster '", name, "': nodes must be 0 (any) or more, got ", nodes);
  if (gpus_per_node < 0)
    DT_INPUT_ERROR("cluster '", name, "': gpus_per_node must be 0 (all) or more, got ", gpus_per_node);
  if (nics_per_node < 1 || (gpus_per_node > 0 && gpus_per_node % nics_per_node != 0))
    DT_INPUT_ERROR("cluster '", name, "': nics_per_node ", nics_per_node,
                   " must be at least 1 and divide gpus_per_node ", gpus_per_node);
  for (const double latency : {intra_latency, inter_latency})
    if (!(latency >= 0 && latency <= kMaxLatency))
      DT_INPUT_ERROR("cluster '", name, "': latencies must be from 0 to ", kMaxLatency / kUs, " us; got ",
                     latency / kUs);
  if (nodes > kMaxNodes || gpus_per_node > kMaxGpusPerNode)
    DT_INPUT_ERROR("cluster '", name, "': nodes ", nodes, " and gpus_per_node ", gpus_per_node, " must be at most ",
                   kMaxNodes, " and ", kMaxGpusPerNode);
}

std::vector<std::string> cluster_presets() { return {"a800-16x8", "a800-16x8-4nic", "h100-nx8", "this-machine"}; }

Cluster cluster_from_spec(const std::string& spec) {
  if (spec == "a800-16x8") return a800(8);
  if (spec == "a800-16x8-4nic") return a800(4);
  if (spec == "h100-nx8") return h100();
  if (spec == "this-machine") return measure_this_machine();
  if (spec.ends_with(".json")) {
    std::error_code ec;  // a FIFO would block the open, a device never end
    if (std::filesystem::exists(spec, ec) && !std::filesystem::is_regular_file(spec, ec))
      DT_INPUT_ERROR("cluster file '", spec, "' is not a regular file; give the path of a JSON file");
    std::ifstream in(spec);
    if (!in) DT_INPUT_ERROR("cannot open cluster file '", spec, "'");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      DT_INPUT_ERROR("cluster file '", spec, "' is not valid JSON: ", brief_json_error(e.what()));
    }
    return cluster_from_json(j, spec);
  }
  std::string valid;
  for (const auto& p : cluster_presets()) valid += p + ", ";
  DT_INPUT_ERROR("unknown cluster '", spec, "'; valid: ", valid, "or a path to a .json file (docs/cluster.md)");
}

Cluster measure_this_machine() {
  // Best of a few copies of 64 MiB between touched buffers: the warm copy rate of one core.
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  auto a = std::make_unique<std::byte[]>(kBytes), b = std::make_unique<std::byte[]>(kBytes);
  std::memset(a.get(), 1, kBytes);
  std::memset(b.get(), 2, kBytes);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), kBytes);
    best = std::min(best, seconds_since(t0));
  }
  Cluster c;
  c.name = "this-machine";
  c.origin = "measured";
  c.nodes = 1;
  c.gpus_per_node = 0;
  c.copy = kBytes / std::max(best, 1e-9);
  c.gpu_link = c.copy / 2;
  c.nics_per_node = 1;
  c.nic = c.pcie = c.gpu_link;  // unused: one node
  c.intra_latency = 5 * kUs;
  c.inter_latency = 50 * kUs;
  return c;
}

nlohmann::json to_json(const Cluster& c) {
  return {{"name", c.name},
          {"nodes", c.nodes},
          {"gpus_per_node", c.gpus_per_node},
          {"gpu_link_gb_per_s", c.gpu_link / kGB},
          {"nics_per_node", c.nics_per_node},
          {"nic_gb_per_s", c.nic / kGB},
          {"pcie_gb_per_s", c.pcie / kGB},
          {"intra_latency_us", c.intra_latency / kUs},
          {"inter_latency_us", c.inter_latency / kUs},
          {"copy_gb_per_s", c.copy / kGB}};
}

Cluster cluster_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) DT_INPUT_ERROR("cluster '", origin, "' must be a JSON object");
  for (const auto& [key, value] : j.items())
    if (std::find_if(std::begin(kFields), std::end(kFields), [&](const char* f) { return key == f; }) ==
        std::end(kFields))
      DT_INPUT_ERROR("cluster '", origin, "': unknown field \"", key, "\"; fields: ", field_list());
  Cluster c;
  c.origin = origin;
  c.name = field<std::string>(j, "name", origin);
  c.nodes = field<int>(j, "nodes", origin);
  c.gpus_per_node = field<int>(j, "gpus_per_node", origin);
  c.gpu_link = field<double>(j, "gpu_link_gb_per_s", origin) * kGB;
  c.nics_per_node = field<int>(j, "nics_per_node", origin);
  c.nic = field<double>(j, "nic_gb_per_s", origin) * kGB;
  c.pcie = field<double>(j, "pcie_gb_per_s", origin) * kGB;
  c.intra_latency = field<double>(j, "intra_latency_us", origin) * kUs;
  c.inter_latency = field<double>(j, "inter_latency_us", origin) * kUs;
  c.copy = field<double>(j, "copy_gb_per_s", origin) * kGB;
  c.validate();
  return c;
}

}  // namespace dynatrain::sim
