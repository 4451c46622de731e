#include "job/memory_check.h"

#include <algorithm>
#include <fstream>

#include "common/bytes.h"
#include "common/error.h"
#include "job/mpi_world.h"

namespace dynatrain::job {

std::uint64_t node_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib << 10;
  return 0;
}

void check_node_memory(comm::Transport& world, std::uint64_t rank_bytes, const std::string& what,
                       const std::string& remedy) {
  struct Need {
    std::int64_t host;
    std::uint64_t bytes;
  };
  const std::int64_t host = this_host_id();
  const auto all = comm::all_gather_values(world, Need{host, rank_bytes});
  std::uint64_t node_need = 0, rank_max = 0;
  int node_ranks = 0;
  for (const auto& n : all)
    if (n.host == host) {
      node_need += n.bytes;
      rank_max = std::max(rank_max, n.bytes);
      ++node_ranks;
    }
  const std::uint64_t have = node_available_bytes();
  if (have > 0 && node_need > have)
    DT_INPUT_ERROR(what, " needs up to ", format_bytes(static_cast<double>(rank_max)), " per rank, ",
                   format_bytes(static_cast<double>(node_need)), " for the ", node_ranks,
                   " ranks on this node, which has ", format_bytes(static_cast<double>(have)), " available; ", remedy);
}

}  // namespace dynatrain::job
