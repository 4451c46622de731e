#include "job/switch_probe.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "exec/probe.h"
#include "train/cpu_usage.h"

namespace dynatrain::job {

namespace {

constexpr int kTagLink = 105;

// The lower bound's link, on the path the switch's bytes took: every rank that sent to the
// busiest receiver sends it 64 MiB at once (after a warm-up round) while the other ranks of
// the transition world wait; rate = bytes that arrived / time at the busiest rank.
void measure_link(comm::Transport& tw, const train::SwitchTraffic& traffic, train::SwitchStats& st) {
  int busiest = 0;
  for (int r = 0; r < static_cast<int>(traffic.received.size()); ++r)
    if (traffic.received[r] > traffic.received[busiest]) busiest = r;
  const int me = tw.rank();
  const std::size_t bytes = std::size_t{64} << 20;
  std::vector<int> senders;  // on the busiest rank: the peers it received from
  if (me == busiest)
    for (int peer = 0; peer < static_cast<int>(traffic.recv_bytes.size()); ++peer)
      if (peer != me && traffic.recv_bytes[peer] > 0) senders.push_back(peer);
  const bool sends = me != busiest && traffic.send_bytes[busiest] > 0;
  std::vector<std::byte> buf(sends ? bytes : senders.size() * bytes, std::byte{1});
  double rate = 0;
  std::uint64_t path = 0;  // bit 0: a sender of the same job, bit 1: of another job
  auto round = [&] {
    std::vector<std::unique_ptr<comm::Request>> reqs;
    for (std::size_t i = 0; i < senders.size(); ++i)
      reqs.push_back(tw.irecv(buf.data() + i * bytes, bytes, senders[i], kTagLink));
    if (sends) reqs.push_back(tw.isend(buf.data(), bytes, busiest, kTagLink));
    comm::wait_all(reqs);
  };
  round();  // warm-up: connections made, pages touched
  tw.barrier();
  const auto t0 = Clock::now();
  constexpr int kRounds = 2;
  for (int i = 0; i < kRounds; ++i) round();
  if (me == busiest && !senders.empty()) {
    rate = static_cast<double>(bytes * senders.size() * kRounds) / seconds_since(t0);
    for (int q : senders) path |= traffic.job_id[q] == traffic.job_id[me] ? 1u : 2u;
  }
  tw.broadcast(&rate, sizeof(rate), busiest);
  tw.broadcast(&path, sizeof(path), busiest);
  st.link_bytes_per_s = rate;
  st.link_path = path == 1 ? "same job" : path == 2 ? "between jobs" : path == 3 ? "mixed" : "none";
}

// The commit's traffic again as bare messages: twice, the faster kept (as run-transition
// does); the training thread's CPU over both, halved, max over ranks.
void measure_exchange(comm::Transport& tw, const train::SwitchTraffic& traffic, train::SwitchStats& st) {
  const train::CpuUsage cpu0 = train::CpuUsage::now();
  const auto& to = traffic.send_bytes;
  const auto& from = traffic.recv_bytes;
  const auto runs = exec::measure_plain_exchange(tw, to, from, traffic.chunk_bytes, 2);
  st.exchange_s = *std::min_element(runs.begin(), runs.end());
  const double cpu = train::CpuUsage::now().since(cpu0).thread_s / 2;
  for (double c : comm::all_gather_values(tw, cpu))
    st.commit_cpu.exchange_thread_s = std::max(st.commit_cpu.exchange_thread_s, c);
}

}  // namespace

void BenchmarkSwitchProbe::measure(comm::Transport& transition_world, const train::SwitchTraffic& traffic,
                                   train::SwitchStats& stats) {
  measure_link(transition_world, traffic, stats);
  measure_exchange(transition_world, traffic, stats);
}

}  // namespace dynatrain::job
