#include "comm/probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/clock.h"

namespace dynatrain::comm {

double measure_p2p_bandwidth(Transport& world, std::size_t bytes, int iters) {
  const int peer = world.rank() ^ 1;
  const bool paired = peer < world.size();
  std::vector<std::byte> out(paired ? bytes : 0, std::byte{1}), in(paired ? bytes : 0, std::byte{0});
  if (paired) world.sendrecv(out.data(), bytes, peer, in.data(), bytes, peer, 7);  // warm-up
  world.barrier();
  double rate = 0;
  if (paired) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < iters; ++it) world.sendrecv(out.data(), bytes, peer, in.data(), bytes, peer, 7);
    const double s = seconds_since(t0);
    if (s > 0) rate = static_cast<double>(bytes) * iters / s;
  }
  const auto all = all_gather_values(world, rate);
  return *std::max_element(all.begin(), all.end());
}

}  // namespace dynatrain::comm
