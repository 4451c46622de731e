// Up-front memory checks: refuse, before anything large is allocated, work whose ranks cannot fit
// in their node's memory ("needs X per rank, have Y") instead of leaving it to the kernel's
// out-of-memory killer tens of seconds later. Used by `run-transition` (the switch's state and
// staging) and `train` (the state of the schedule's largest layout plus the switch staging).
#pragma once

#include <cstdint>
#include <string>

#include "comm/transport.h"

namespace dynatrain::job {

// Bytes the kernel could still give this node ("MemAvailable" in /proc/meminfo); 0 when unknown.
std::uint64_t node_available_bytes();

// Collective over `world` (one all-gather): every rank passes the bytes it needs; when the ranks
// of a node together need more than the node's MemAvailable, every rank of that node throws the
// same InputError: "<what> needs up to X per rank, Y for the N ranks on this node, which has Z
// available; <remedy>". Unknown MemAvailable (0) passes.
void check_node_memory(comm::Transport& world, std::uint64_t rank_bytes, const std::string& what,
                       const std::string& remedy);

}  // namespace dynatrain::job
