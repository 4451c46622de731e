// The plain-exchange probe: what the link alone does with a switch's bytes, in the engine's
// peer order, with no packing, state or allocation. A benchmark floor that switch times are
// compared with (run-transition's "plain exchange", the trainer's bare exchanges after a
// switch, the simulator's link calibration), never part of a switch itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::exec {

// Collective: every rank exchanges with each peer of the XOR order (the engine's) as many bytes
// as it sends to / receives from it (`send_bytes[q]`, `recv_bytes[q]`), as plain messages of at
// most `chunk` bytes, two in flight, from and into buffers written before the first run (sized
// to the longest message, not to `chunk`). Returns each of `runs` runs' seconds, the slowest
// rank's of each (equal on every rank).
std::vector<double> measure_plain_exchange(comm::Transport& world, const std::vector<std::uint64_t>& send_bytes,
                                           const std::vector<std::uint64_t>& recv_bytes, std::size_t chunk, int runs);

}  // namespace dynatrain::exec
