#include "testing/state_oracle.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "testing/fill.h"
#include "common/clock.h"

namespace dynatrain::testing {

std::vector<std::byte*> allocate_filled(const vps::Layout& model_layout, const vps::RankLayout& layout,
                                        exec::StateAllocator& alloc) {
  const auto& eb = model_layout.options().elem_bytes;
  std::vector<std::byte*> bufs(layout.buffers.size(), nullptr);
  for (std::size_t i = 0; i < layout.buffers.size(); ++i) {
    const auto& b = layout.buffers[i];
    const int e = eb[static_cast<int>(b.kind)];
    const std::size_t bytes = static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(e);
    if (bytes == 0) continue;
    bufs[i] = alloc.allocate(bytes);
    std::memset(bufs[i], 0, bytes);
    fill_buffer(model_layout.tensors(), b, e, bufs[i]);
  }
  return bufs;
}

void release_all(const vps::Layout& model_layout, const vps::RankLayout& layout,
                 std::vector<std::byte*>& bufs, exec::StateAllocator& alloc) {
  const auto& eb = model_layout.options().elem_bytes;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    if (!bufs[i]) continue;
    const auto& b = layout.buffers[i];
    alloc.release(bufs[i], static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(eb[static_cast<int>(b.kind)]));
    bufs[i] = nullptr;
  }
}

int verify_state(const vps::Layout& model_layout, const vps::RankLayout& layout,
                 const std::vector<std::byte*>& bufs, std::string* first, std::uint32_t zeroed_kinds) {
  const auto& eb = model_layout.options().elem_bytes;
  int bad = 0;
  for (std::size_t i = 0; i < layout.buffers.size(); ++i) {
    const auto& b = layout.buffers[i];
    if (b.numel == 0) continue;
    if (!bufs.at(i)) {
      if (bad++ == 0 && first) *first = "buffer " + std::to_string(i) + " missing";
      continue;
    }
    if ((zeroed_kinds >> static_cast<int>(b.kind)) & 1u) {
      const std::size_t n = static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(eb[static_cast<int>(b.kind)]);
      const std::byte* p = bufs[i];
      const std::size_t at = static_cast<std::size_t>(std::find_if(p, p + n, [](std::byte x) { return x != std::byte{0}; }) - p);
      if (at < n && bad++ == 0 && first)
        *first = "buffer " + std::to_string(i) + " (" + vps::state_kind_name(b.kind) +
                 ", materialised zeroed) has a non-zero byte at " + std::to_string(at);
      continue;
    }
    if (auto m = verify_buffer(model_layout.tensors(), b, eb[static_cast<int>(b.kind)], bufs[i])) {
      if (bad++ == 0 && first) *first = m->str(model_layout.tensors());
    }
  }
  return bad;
}

std::vector<std::uint64_t> gather_u64(comm::Transport& world, std::uint64_t value) {
  return comm::all_gather_values(world, value);
}

std::vector<double> gather_double(comm::Transport& world, double value) {
  return comm::all_gather_values(world, value);
}

double measure_p2p_bandwidth(comm::Transport& world, std::size_t bytes, int iters) {
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
  const auto all = gather_double(world, rate);
  return *std::max_element(all.begin(), all.end());
}

double measure_plain_exchange(comm::Transport& world, const std::vector<std::uint64_t>& send_bytes,
                              const std::vector<std::uint64_t>& recv_bytes, std::size_t chunk) {
  const int W = world.size(), me = world.rank();
  std::vector<std::byte> out(2 * chunk, std::byte{1}), in(2 * chunk, std::byte{0});
  struct Round {
    int peer;
    std::size_t send, recv;
  };
  std::vector<Round> rounds;  // the engine's order: XOR steps, then chunks of the pair
  int steps = 1;
  while (steps < W) steps <<= 1;
  for (int s = 1; s < steps; ++s) {
    const int q = me ^ s;
    if (q >= W) continue;
    std::uint64_t so = send_bytes[static_cast<std::size_t>(q)], ri = recv_bytes[static_cast<std::size_t>(q)];
    while (so > 0 || ri > 0) {
      const std::size_t a = static_cast<std::size_t>(std::min<std::uint64_t>(so, chunk));
      const std::size_t b = static_cast<std::size_t>(std::min<std::uint64_t>(ri, chunk));
      rounds.push_back({q, a, b});
      so -= a, ri -= b;
    }
  }
  world.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<comm::Request>> flight(4);  // two rounds: (recv, send) each
  auto post = [&](std::size_t k) {
    const Round& r = rounds[k];
    const std::size_t slot = k % 2;
    flight[2 * slot] = r.recv ? world.irecv(in.data() + slot * chunk, r.recv, r.peer, 8) : nullptr;
    flight[2 * slot + 1] = r.send ? world.isend(out.data() + slot * chunk, r.send, r.peer, 8) : nullptr;
  };
  if (!rounds.empty()) post(0);
  for (std::size_t k = 0; k < rounds.size(); ++k) {
    if (k + 1 < rounds.size()) post(k + 1);
    for (std::size_t i = 2 * (k % 2); i < 2 * (k % 2) + 2; ++i)
      if (flight[i]) flight[i]->wait(), flight[i].reset();
  }
  const double mine = seconds_since(t0);
  const auto all = gather_double(world, mine);
  return *std::max_element(all.begin(), all.end());
}

}  // namespace dynatrain::testing
