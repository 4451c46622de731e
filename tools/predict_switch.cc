#include "tools/predict_switch.h"

#include <chrono>
#include <cstring>
#include <numeric>
#include <algorithm>
#include <vector>

#include "sim/trace.h"
#include "testing/state_oracle.h"

namespace dynatrain::tools {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

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
    best = std::min(best, since(t0));
  }
  if (alone) world.barrier();
  return kBytes / std::max(best, 1e-9);
}

// The link: this rank's rate receiving 64 MiB from rank^1 while it sends as much back, all
// pairs at once (as testing::measure_p2p_bandwidth), five times, each after a barrier; the
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
    rates.push_back(kBytes / std::max(since(t0), 1e-9));
  }
  std::nth_element(rates.begin(), rates.begin() + 2, rates.end());
  const auto all = testing::gather_double(world, paired ? rates[2] : -1);
  double sum = 0;
  int count = 0;
  for (double v : all)
    if (v > 0) sum += v, ++count;
  return count > 0 ? sum / count : 0;
}

// One-way latency of a small message between rank and rank^1, all pairs at once.
double latency(comm::Transport& world) {
  constexpr int kIters = 200;
  const int peer = world.rank() ^ 1;
  std::array<std::byte, 8> out{}, in{};
  world.barrier();
  if (peer >= world.size()) return 0;
  world.sendrecv(out.data(), out.size(), peer, in.data(), in.size(), peer, 11);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) world.sendrecv(out.data(), out.size(), peer, in.data(), in.size(), peer, 11);
  return since(t0) / kIters;
}

// The mean bytes of a run of the scattered messages in the traces (ScheduleEvent::send_runs:
// the sends and receives of more than one run), 0 when there are none.
double mean_scattered_run_bytes(const std::vector<exec::ScheduleTrace>& traces) {
  double bytes = 0, runs = 0;
  for (const auto& t : traces)
    for (const auto& e : t.events) {
      if (e.kind != exec::ScheduleEvent::Kind::kPost) continue;
      if (e.send_runs > 1) bytes += static_cast<double>(e.send_bytes), runs += e.send_runs;
      if (e.recv_runs > 1) bytes += static_cast<double>(e.recv_bytes), runs += e.recv_runs;
    }
  return runs > 0 ? bytes / runs : 0;
}

// Seconds per run of a scattered direct message (SimOptions::run_seconds), all pairs (rank,
// rank^1) at once, as the link rate is measured: the even rank sends `n` runs of `run_bytes`
// (one gap of run_bytes between them, as a TP slice's rows) into one contiguous run of the odd
// rank, then the same bytes as one run each side; (scattered - contiguous) / n, best of three
// each, the mean over ranks. 0 where the pair does not move runs direct (they are packed).
double run_cost(comm::Transport& world, double run_bytes) {
  const int peer = world.rank() ^ 1;
  const bool paired = peer < world.size() && world.runs_direct(peer);
  const std::size_t run = std::max<std::size_t>(64, static_cast<std::size_t>(run_bytes));
  const std::size_t n = std::clamp<std::size_t>((std::size_t{16} << 20) / run, 64, 65536);
  const bool sender = world.rank() % 2 == 0;
  std::vector<std::byte> buf(paired ? 2 * n * run : 0, std::byte{3});
  std::vector<comm::ByteRun> scattered(n), whole{{0, n * run}};
  for (std::size_t i = 0; i < n; ++i) scattered[i] = {2 * i * run, run};
  auto timed = [&](const std::vector<comm::ByteRun>& mine) {
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      if (paired) {
        auto r = sender ? world.isend_runs(buf.data(), mine, peer, 12) : world.irecv_runs(buf.data(), whole, peer, 12);
        r->wait();
      }
      best = std::min(best, since(t0));
    }
    return best;
  };
  const double apart = timed(scattered), together = timed(whole);
  const auto per_run = testing::gather_double(world, paired ? std::max(0.0, apart - together) / n : -1);
  double sum = 0;
  int count = 0;
  for (double v : per_run)
    if (v >= 0) sum += v, ++count;
  return count > 0 ? sum / count : 0;
}

}  // namespace

SwitchPrediction predict_switch(comm::Transport& world, const plan::Planner& planner,
                                const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                const exec::TransitionOptions& options) {
  const double link = link_rate(world);
  const auto copies = testing::gather_double(world, copy_rate(world));
  const double solo = copy_rate(world, true);  // rank 0 only
  const double lat = latency(world);
  const auto lats = testing::gather_double(world, lat);
  SwitchPrediction out;
  sim::Cluster& c = out.cluster;
  c.name = "this-machine";
  c.origin = "measured in this run";
  c.nodes = 0;
  c.gpus_per_node = options.topology.gpus_per_node;
  c.nics_per_node = 1;
  c.gpu_link = c.nic = c.pcie = link;
  c.copy = mean(copies);
  double lat_sum = 0;
  int pairs = 0;
  for (int r = 0; r < world.size(); ++r)
    if ((r ^ 1) < world.size()) lat_sum += lats[r], ++pairs;
  c.intra_latency = c.inter_latency = pairs > 0 ? lat_sum / pairs : 0;
  // The shared-memory transport and every copy are work for the cores these processes get.
  const double n = world.size();
  out.cpu_cores = solo > 0 ? std::clamp(n * c.copy / solo, 1.0, n) : n;
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
  const double run_bytes =
      testing::gather_double(world, world.rank() == 0 ? mean_scattered_run_bytes(traces) : 0)[0];
  out.run_bytes = run_bytes;
  out.run_seconds = run_bytes > 0 ? run_cost(world, run_bytes) : 0;
  if (world.rank() == 0) {
    out.result = sim::simulate(traces, c, {.cpu_cores = out.cpu_cores, .run_seconds = out.run_seconds});
    out.without_runs_seconds = sim::simulate(traces, c, {.cpu_cores = out.cpu_cores}).seconds;
  }
  return out;
}

}  // namespace dynatrain::tools
