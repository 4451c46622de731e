// The switch-time simulator: plays every process's schedule (exec/schedule_trace.h, from the
// engine's own dry run: sim/trace.h) through a model of the cluster's links (sim/cluster.h).
//
// The model (docs/cluster.md states it with its assumptions):
//   - Ports, one per direction: every GPU's intra-node link (gpu_link), every GPU's PCIe link to
//     its NIC (pcie), every NIC (nic, shared by the gpus_per_nic() GPUs behind it). A message
//     inside a node uses the sender's link out and the receiver's link in; across nodes the
//     sender's PCIe out and NIC out, the receiver's NIC in and PCIe in.
//   - A message starts when both sides have posted it (rendezvous, as MPI does for large
//     messages) plus one latency (intra_latency or inter_latency), then flows at the smallest
//     equal share (rate / flows on the port) of its ports, recomputed whenever a flow on one
//     of them starts or ends. Unused shares are not handed on (max-min fairness would): a
//     slightly pessimistic, simple rule.
//   - Each process runs its events in order, one at a time: pack before a post, keeps and
//     unpacks are copies at `copy` bytes/s on the process itself; fresh destination memory
//     costs bytes / fresh_rate (0: free, the pool recycles pages: a warm switch). A wait blocks
//     the process until its message is done; messages flow while the process copies, so the
//     engine's rounds in flight (per link class, exec/README.md) and its keeps overlap the
//     network as they do for real.
//   - A message moved straight between scattered runs pays per run (SimOptions::run_seconds).
//   - Nothing else: no agreement collectives, no planning. CPU contention only where asked
//     (SimOptions::cpu_cores: processes sharing a few cores, as on this machine).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/schedule_trace.h"
#include "sim/cluster.h"

namespace dynatrain::sim {

struct SimOptions {
  double fresh_rate = 0;  // bytes/s of first-touch destination memory; 0: free (warm)
  // CPU cores each node's processes share (may be fractional: the cores they get on a loaded
  // machine, tools/predict_switch.h); 0: not modelled (GPUs: copies and transfers run
  // on their own engines). With C > 0 (this machine: the shared-memory transport and every
  // copy are CPU work) the cluster's rates are read as measured with every process of a node
  // busy at once (N processes; a full core is N / C times faster, 1 when N <= C). A process
  // gets min(1, C / k) of a core while k processes of its node are busy (it is busy while it
  // copies or has a message in flight that it moves). One side moves a message's bytes, as
  // cross-memory attach does (comm/README.md): the receiver reads them, or the sender writes
  // them when its runs are more than twice the receiver's and at least 64; the other side
  // spends nothing on it. A copy byte costs 1 / copy of a full core, a message byte 1 /
  // gpu_link on its copier (the link is measured with every process reading its peer's
  // message at once); a process's share is split evenly over the messages it moves. The link
  // ports stay as they are (at a full core's rate). A message makes no progress while its
  // copier copies (pack, unpack, keep): a CPU-only MPI moves the bytes inside that process's
  // calls (Open MPI's shared-memory transport has no progress thread), so a process's copies
  // and the messages it moves do not overlap; its copy then runs at its whole share. (The
  // one-copier rule is cross-memory attach inside a node; between nodes over TCP both ends
  // work, which this model does not charge: CPU sharing is meant for one-node runs.)
  double cpu_cores = 0;
  // Seconds per byte run of a message that moves straight between scattered runs
  // (ScheduleEvent::send_runs / recv_runs), beyond the first run: the kernel's cross-memory
  // copy pins and copies run by run (comm/README.md), so a strided message is slower than a
  // contiguous one of the same bytes. A message of R runs (the more scattered side's count)
  // carries (R - 1) x run_seconds x gpu_link bytes of extra work on its ports and ends: alone
  // on a link (and a full core) it takes bytes / gpu_link + (R - 1) x run_seconds. With
  // cpu_cores, measured like the link with every process busy (tools/predict_switch.h).
  // 0: runs cost nothing (GPUs: the copy engines move strided runs at the link's rate).
  double run_seconds = 0;
};

struct SimResult {
  double seconds = 0;            // the predicted switch time: when the last process is done
  int last_process = 0;          // the process that finishes last (the end of the critical path)
  double last_copy_seconds = 0;  // its time copying (pack, unpack, keep, fresh memory)
  double last_wait_seconds = 0;  // its time blocked on messages
  std::string critical_link;     // the port that limited the messages it waited on longest
  std::string busiest_link;      // the port with the most bytes over its rate
  double busiest_link_seconds = 0;
  std::uint64_t busiest_link_bytes = 0;
  std::uint64_t messages = 0, bytes = 0;  // messages and their bytes, all processes
  std::uint64_t events = 0;               // trace events played
  // Busiest port's busy time over the predicted time.
  double utilisation() const { return seconds > 0 ? busiest_link_seconds / seconds : 0; }
};

// `traces[p]` is process p's schedule; processes sit on the cluster as
// cluster.topology(traces.size()) says. Throws InvariantError when the traces do not pair up
// (a send without its receive, or sizes that differ).
SimResult simulate(const std::vector<exec::ScheduleTrace>& traces, const Cluster& cluster,
                   const SimOptions& options = {});

// `cluster` with every link port (gpu_link, nic, pcie) scaled by one factor so that `traces`
// play in `measured` seconds: the link rate a measured exchange implies (tools/predict_switch.h
// calibrates on the switch's plain exchange, sim/trace.h). The time of a link-bound schedule goes
// as 1 / rate; a few rescalings settle latency and core sharing. Unchanged when nothing moves.
Cluster calibrate_links(const std::vector<exec::ScheduleTrace>& traces, double measured, Cluster cluster,
                        const SimOptions& options = {});

// Readable lines: predicted time, critical path, busiest link and its utilisation.
std::string format_sim(const SimResult& result);

}  // namespace dynatrain::sim
