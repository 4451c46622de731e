#include "exec/probe.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/clock.h"

namespace dynatrain::exec {

namespace {

struct Round {
  int peer;
  std::size_t send, recv;
};

// The engine's order: XOR steps, then chunks of at most `chunk` bytes of each pair.
std::vector<Round> exchange_rounds(int me, int world_size, const std::vector<std::uint64_t>& send_bytes,
                                   const std::vector<std::uint64_t>& recv_bytes, std::size_t chunk) {
  std::vector<Round> rounds;
  int steps = 1;
  while (steps < world_size) steps <<= 1;
  for (int s = 1; s < steps; ++s) {
    const int q = me ^ s;
    if (q >= world_size) continue;
    std::uint64_t so = send_bytes[static_cast<std::size_t>(q)], ri = recv_bytes[static_cast<std::size_t>(q)];
    while (so > 0 || ri > 0) {
      const std::size_t a = static_cast<std::size_t>(std::min<std::uint64_t>(so, chunk));
      const std::size_t b = static_cast<std::size_t>(std::min<std::uint64_t>(ri, chunk));
      rounds.push_back({q, a, b});
      so -= a, ri -= b;
    }
  }
  return rounds;
}

}  // namespace

std::vector<double> measure_plain_exchange(comm::Transport& world, const std::vector<std::uint64_t>& send_bytes,
                                           const std::vector<std::uint64_t>& recv_bytes, std::size_t chunk, int runs) {
  const auto rounds = exchange_rounds(world.rank(), world.size(), send_bytes, recv_bytes, chunk);
  std::size_t longest = 0;  // the buffers hold two rounds' messages, no more
  for (const Round& r : rounds) longest = std::max({longest, r.send, r.recv});
  std::vector<std::byte> out(2 * longest, std::byte{1}), in(2 * longest, std::byte{0});  // written: warm
  std::vector<std::unique_ptr<comm::Request>> flight(4);  // two rounds: (recv, send) each
  auto post = [&](std::size_t k) {
    const Round& r = rounds[k];
    const std::size_t slot = k % 2;
    flight[2 * slot] = r.recv ? world.irecv(in.data() + slot * longest, r.recv, r.peer, 8) : nullptr;
    flight[2 * slot + 1] = r.send ? world.isend(out.data() + slot * longest, r.send, r.peer, 8) : nullptr;
  };
  std::vector<double> seconds;
  for (int run = 0; run < runs; ++run) {
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (!rounds.empty()) post(0);
    for (std::size_t k = 0; k < rounds.size(); ++k) {
      if (k + 1 < rounds.size()) post(k + 1);
      for (std::size_t i = 2 * (k % 2); i < 2 * (k % 2) + 2; ++i)
        if (flight[i]) flight[i]->wait(), flight[i].reset();
    }
    const double mine = seconds_since(t0);
    const auto all = comm::all_gather_values(world, mine);
    seconds.push_back(*std::max_element(all.begin(), all.end()));
  }
  return seconds;
}

}  // namespace dynatrain::exec
