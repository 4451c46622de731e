// Link probes: what the transport itself moves, measured with plain messages and no state.
// Benchmark figures (the lower bounds that switch times are compared with), not part of a
// switch: run-transition and `train --json` call them outside the measured pause.
#pragma once

#include <cstddef>

#include "comm/transport.h"

namespace dynatrain::comm {

// Collective: every pair (r, r^1) exchanges `bytes` both ways at once, `iters` times after one
// warm-up. Returns the highest per-rank receive rate in bytes/s (equal on every rank; 0 when
// no rank has a partner).
double measure_p2p_bandwidth(Transport& world, std::size_t bytes, int iters = 3);

}  // namespace dynatrain::comm
