#include "tools/predict_switch.h"

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <vector>

#include "sim/trace.h"
#include "common/clock.h"

namespace dynatrain::tools {

namespace {

// The mean over ranks of `mine`, ranks that pass a negative value (no partner) left out; 0 if
// every rank does. Collective.
double mean_over_ranks(comm::Transport& world, double mine) {
  double sum = 0;
  int count = 0;
  for (double v : comm::all_gather_values(world, mine))
    if (v >= 0) sum += v, ++count;
  return count > 0 ? sum / count : 0;
}

// Seconds of the fastest of three runs of `work`, each started after a barrier of all ranks.
template <typename Work>
double fastest_of_three(comm::Transport& world, Work work) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    work();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// This rank's memcpy rate (best of three 64 MiB copies) with every rank copying at once, or
// (`alone`) with rank 0 copying while the others wait in a barrier.
double copy_rate(comm::Transport& world, bool alone = false) {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  std::vector<std::byte> a(kBytes, std::byte{1}), b(kBytes, std::byte{2});
  world.barrier();
  if (alone && world.rank() != 0) {
    world.barrier();
    return 0;
  }
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), kBytes);
    best = std::min(best, seconds_since(t0));
  }
  if (alone) world.barrier();
  return kBytes / std::max(best, 1e-9);
}

// The link: this rank's rate receiving 64 MiB from rank^1 while it sends as much back, all
// pairs at once (as comm::measure_p2p_bandwidth), five times, each after a barrier; the
// median of the five per rank, the mean over ranks. run-transition's bound takes the best pair
// of one 3-message burst; on a loaded machine that swings 2-5x between runs of the same switch,
// so the model takes the typical rate, not the luckiest.
double link_rate(comm::Transport& world) {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  const int peer = world.rank() ^ 1;
  const bool paired = peer < world.size();
  std::vector<std::byte> out(paired ? kBytes : 0, std::byte{1}), in(paired ? kBytes : 0, std::byte{0});
  if (paired) world.sendrecv(out.data(), kBytes, peer, in.data(), kBytes, peer, 13);  // warm-up
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (paired) world.sendrecv(out.data(), kBytes, peer, in.data(), kBytes, peer, 13);
    rates.push_back(kBytes / std::max(seconds_since(t0), 1e-9));
  }
  std::nth_element(rates.begin(), rates.begin() + 2, rates.end());
  return mean_over_ranks(world, paired ? rates[2] : -1);
}

// One-way latency of a small message between rank and rank^1, all pairs at once; the mean over
// the ranks that have a partner (0 when none has).
double latency(comm::Transport& world) {
  constexpr int kIters = 200;
  const int peer = world.rank() ^ 1;
  std::array<std::byte, 8> out{}, in{};
  world.barrier();
  if (peer >= world.size()) return mean_over_ranks(world, -1);
  world.sendrecv(out.data(), out.size(), peer, in.data(), in.size(), peer, 11);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) world.sendrecv(out.data(), out.size(), peer, in.data(), in.size(), peer, 11);
  return mean_over_ranks(world, seconds_since(t0) / kIters);
}

// The cost of one handshake with rank^1 while every process is busy moving chunks of `bytes`,
// all pairs at once: each rank copies `bytes` (memcpy between 64 MiB buffers, at a rotating
// offset, so from memory as a chunk of the switch is) then exchanges 8 bytes with rank^1, 40
// times; minus the same copies without the exchanges; best of three each, the mean over ranks.
// With more processes than cores a process that waits by polling gets its core back only when
// a copier yields it, so a handshake under load costs far more than an idle ping-pong
// (docs/cluster.md). 0 where rank^1 does not exist.
double busy_handoff(comm::Transport& world, std::uint64_t bytes) {
  constexpr std::size_t kBuffer = std::size_t{64} << 20;
  constexpr int kIters = 40;
  const int peer = world.rank() ^ 1;
  const bool paired = peer < world.size();
  const std::size_t n = std::clamp<std::size_t>(static_cast<std::size_t>(bytes), 4096, kBuffer / 2);
  std::vector<std::byte> a(kBuffer, std::byte{1}), b(kBuffer, std::byte{2});
  std::array<std::byte, 8> out{}, in{};
  auto copies = [&](bool handshake) {
    for (int i = 0; i < kIters; ++i) {
      const std::size_t at = (static_cast<std::size_t>(i) * n) % (kBuffer - n);
      std::memcpy(b.data() + at, a.data() + at, n);
      if (handshake && paired) world.sendrecv(out.data(), out.size(), peer, in.data(), in.size(), peer, 14);
    }
  };
  const double alone = fastest_of_three(world, [&] { copies(false); }) / kIters;
  const double synced = fastest_of_three(world, [&] { copies(true); }) / kIters;
  return mean_over_ranks(world, paired ? std::max(0.0, synced - alone) : -1);
}

// The mean bytes of the switch's messages (0: none).
double mean_message_bytes(const std::vector<exec::ScheduleTrace>& traces) {
  double bytes = 0, count = 0;
  for (const auto& t : traces)
    for (const auto& e : t.events)
      if (e.kind == exec::ScheduleEvent::Kind::kPost && e.send_bytes > 0)
        bytes += static_cast<double>(e.send_bytes), ++count;
  return count > 0 ? bytes / count : 0;
}

// The typical scattered direct message of the switch (a message with more than one run on
// either side): its mean bytes and the mean run count of each side, over the traces' messages
// (ScheduleEvent::send_runs / recv_runs; a message's send and receive are two ranks' posts).
struct MessageShape {
  double bytes = 0, send_runs = 0, recv_runs = 0;
  double run_bytes() const { return bytes / std::max({send_runs, recv_runs, 1.0}); }  // of the more scattered side
};
MessageShape scattered_shape(const std::vector<exec::ScheduleTrace>& traces) {
  using Key = std::tuple<int, std::uint32_t, int, int>;         // wave, round, sender, receiver
  std::map<Key, std::pair<std::uint32_t, std::uint32_t>> runs;  // (send runs, receive runs)
  std::map<Key, std::uint64_t> bytes;
  for (const auto& t : traces)
    for (const auto& e : t.events) {
      if (e.kind != exec::ScheduleEvent::Kind::kPost) continue;
      if (e.send_bytes > 0) {
        const Key k{e.wave, e.round, t.rank, e.peer};
        runs[k].first = e.send_runs;
        bytes[k] = e.send_bytes;
      }
      if (e.recv_bytes > 0) runs[{e.wave, e.round, e.peer, t.rank}].second = e.recv_runs;
    }
  MessageShape shape;
  double n = 0;
  for (const auto& [k, r] : runs)
    if (r.first > 1 || r.second > 1) {
      shape.bytes += static_cast<double>(bytes[k]);
      shape.send_runs += r.first, shape.recv_runs += r.second;
      ++n;
    }
  if (n > 0) shape.bytes /= n, shape.send_runs /= n, shape.recv_runs /= n;
  return shape;
}

// `count` runs of `bytes` each, one gap of `bytes` between them (a TP slice's rows).
std::vector<comm::ByteRun> strided_runs(std::size_t count, std::size_t bytes) {
  std::vector<comm::ByteRun> runs(count);
  for (std::size_t i = 0; i < count; ++i) runs[i] = {2 * i * bytes, bytes};
  return runs;
}

// Seconds per run of a scattered direct message (SimOptions::run_seconds), all pairs (rank,
// rank^1) at once, as the link rate is measured. The even rank sends messages of the switch's
// typical shape (`shape`: its bytes, each side split into its mean number of runs, gaps
// between them as a TP slice's rows), so the transport picks the same copier (reader or
// writer, comm/README.md) and pins the same runs as in the switch; then the same messages with
// one run each side; (scattered - contiguous) / runs of the more scattered side, best of three
// each, the mean over ranks. 0 where the pair does not move runs direct (they are packed).
double run_cost(comm::Transport& world, const MessageShape& shape) {
  const int peer = world.rank() ^ 1;
  const bool paired = peer < world.size() && world.runs_direct(peer);
  const auto side_runs = [&](double runs) { return std::max<std::size_t>(1, static_cast<std::size_t>(runs + 0.5)); };
  const std::size_t send_n = side_runs(shape.send_runs), recv_n = side_runs(shape.recv_runs);
  const std::size_t msg = std::max<std::size_t>(std::max(send_n, recv_n) * 64, static_cast<std::size_t>(shape.bytes));
  const std::size_t count = std::clamp<std::size_t>((std::size_t{16} << 20) / msg, 1, 4096);  // ~16 MiB in all
  const bool sender = world.rank() % 2 == 0;
  const std::size_t mine_n = sender ? send_n : recv_n;
  const std::size_t run = msg / mine_n;  // the last run takes the remainder
  std::vector<comm::ByteRun> scattered = strided_runs(mine_n, run), whole{{0, msg}};
  scattered.back().bytes += msg - run * mine_n;
  std::vector<std::byte> buf(paired ? 2 * msg + 2 * run : 0, std::byte{3});
  auto messages = [&](const std::vector<comm::ByteRun>& mine) {
    for (std::size_t m = 0; paired && m < count; ++m) {
      auto r = sender ? world.isend_runs(buf.data(), mine, peer, 12) : world.irecv_runs(buf.data(), mine, peer, 12);
      r->wait();
    }
  };
  const double apart = fastest_of_three(world, [&] { messages(scattered); });
  const double together = fastest_of_three(world, [&] { messages(whole); });
  const double runs = static_cast<double>(count) * static_cast<double>(std::max(send_n, recv_n) - 1);
  return mean_over_ranks(world, paired && runs > 0 ? std::max(0.0, apart - together) / runs : -1);
}

}  // namespace

SwitchPrediction predict_switch(comm::Transport& world, const plan::Planner& planner,
                                const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                const exec::TransitionOptions& options, const PlainExchange& plain) {
  const double link = link_rate(world);
  const auto copies = comm::all_gather_values(world, copy_rate(world));
  const double solo = copy_rate(world, true);  // rank 0 only
  const double lat = latency(world);
  SwitchPrediction out;
  sim::Cluster& c = out.cluster;
  c.name = "this-machine";
  c.origin = "measured in this run";
  c.nodes = 0;
  c.gpus_per_node = options.topology.gpus_per_node;
  c.nics_per_node = 1;
  c.gpu_link = c.nic = c.pcie = link;
  c.copy = mean(copies);
  c.intra_latency = c.inter_latency = lat;
  // The shared-memory transport and every copy are work for the cores these processes get.
  const double n = world.size();
  // No more than the host's CPUs (the ranks share one host; mpirun may bind each to one of them).
  const double cpus = std::max(1u, std::thread::hardware_concurrency());
  out.cpu_cores = std::min(solo > 0 ? std::clamp(n * c.copy / solo, 1.0, n) : n, cpus);
  // The tracer's in-process transport moves runs direct between every pair; this run's transport
  // may not (comm/mpi: only when the whole communicator is on one node), and then it packs.
  exec::TransitionOptions traced = options;
  traced.direct_runs = options.direct_runs && (world.size() < 2 || world.runs_direct(world.rank() == 0 ? 1 : 0));
  // The tracer puts its processes on nodes of options.topology; its link classes follow this
  // run's transport: auto means on exactly when this run's ranks span hosts.
  if (traced.overlap_links == exec::LinkOverlap::kAuto) {
    bool spans = false;
    for (int r = 0; r < world.size(); ++r) spans |= world.node_of(r) != world.node_of(0);
    traced.overlap_links = spans ? exec::LinkOverlap::kOn : exec::LinkOverlap::kOff;
  }
  // Rank 0 traces every process's engine; the probe of scattered runs then uses the switch's own
  // mean run size.
  std::vector<exec::ScheduleTrace> traces;
  if (world.rank() == 0) traces = sim::trace_switch(planner, elem_bytes, traced);
  // What the probes below need from the traces, from rank 0 to every rank in one broadcast: the
  // typical scattered message (bytes, runs of each side) and the mean message bytes.
  std::array<double, 4> from_traces{};
  if (world.rank() == 0) {
    const MessageShape s = scattered_shape(traces);
    from_traces = {s.bytes, s.send_runs, s.recv_runs, mean_message_bytes(traces)};
  }
  world.broadcast(from_traces.data(), sizeof from_traces, 0);
  const MessageShape shape{from_traces[0], from_traces[1], from_traces[2]};
  const double message = from_traces[3];
  out.run_bytes = shape.bytes > 0 ? shape.run_bytes() : 0;
  out.message_bytes = shape.bytes, out.send_runs = shape.send_runs, out.recv_runs = shape.recv_runs;
  out.run_seconds = shape.bytes > 0 ? run_cost(world, shape) : 0;
  // A message's start costs the handshake under the switch's load, when that exceeds the idle
  // latency (processes outnumbering cores).
  out.idle_latency = c.intra_latency;
  out.busy_handoff = message > 0 ? busy_handoff(world, static_cast<std::uint64_t>(message)) : 0;
  c.intra_latency = c.inter_latency = std::max(c.intra_latency, out.busy_handoff);
  if (world.rank() == 0) {
    const sim::SimOptions with_runs{.cpu_cores = out.cpu_cores, .run_seconds = out.run_seconds};
    sim::Cluster idle = c;  // the idle ping-pong as latency
    idle.intra_latency = idle.inter_latency = out.idle_latency;
    out.probe_link = link;
    out.probe_link_seconds = sim::simulate(traces, idle, with_runs).seconds;
    if (plain.seconds > 0 && plain.chunk > 0) {
      const auto exchange = sim::plain_exchange_traces(traces, plain.chunk);
      c = sim::calibrate_links(exchange, plain.seconds, c, {.cpu_cores = out.cpu_cores});
      idle = sim::calibrate_links(exchange, plain.seconds, idle, {.cpu_cores = out.cpu_cores});
    }
    out.idle_latency_seconds = sim::simulate(traces, idle, with_runs).seconds;
    out.result = sim::simulate(traces, c, with_runs);
    out.without_runs_seconds = sim::simulate(traces, c, {.cpu_cores = out.cpu_cores}).seconds;
  }
  return out;
}

}  // namespace dynatrain::tools
