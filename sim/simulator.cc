// Implementation notes (the model is in simulator.h): a discrete-event loop over one heap of
// (time, what) entries: a process wakes (after a copy, or when the message it waits on is
// done), a message starts (both sides posted, plus latency), a message may end (its end time
// under its current rate; stale entries are skipped by a version number).
#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "common/error.h"

namespace dynatrain::sim {

namespace {

using exec::ScheduleEvent;

struct Port {
  double rate = 0;
  std::vector<int> flows;  // messages on the port now
  std::uint64_t bytes = 0;
};

struct Message {
  int src = 0, dst = 0;
  std::uint64_t bytes = 0;
  double send_post = -1, recv_post = -1;
  bool started = false, done = false;
  double remaining = 0, rate = 0, last = 0;
  std::uint32_t version = 0;
  std::vector<int> ports;
  int bottleneck = -1;  // the port that set its rate last
  bool copy = false;    // a copy on process src (== dst) at `base` bytes/s, not a message
  double base = 0;
  std::uint32_t send_runs = 1, recv_runs = 1;  // byte runs of each side (ScheduleEvent)
  int copier = -1;                             // the process whose core moves the bytes (set at start; copy: src)
};

struct Process {
  std::size_t pc = 0;
  int phase = 0;        // progress inside event pc: 0 not begun; 1 copy done / receive done
  int blocked_on = -1;  // message
  double blocked_since = 0;
  double copy = 0, wait = 0, finish = 0;
  std::map<int, double> wait_by_port;
  int active = 0;        // its copy and the messages in flight it copies (busy when > 0)
  bool copying = false;  // in a pack, unpack, keep or fresh-memory copy (not inside the transport)
};

enum class What : std::uint8_t { kWake, kStart, kEnd };
struct Entry {
  double time;
  What what;
  int id;
  std::uint32_t version;
  bool operator>(const Entry& o) const { return std::tie(time, what, id) > std::tie(o.time, o.what, o.id); }
};

class Simulation {
 public:
  Simulation(const std::vector<exec::ScheduleTrace>& traces, const Cluster& cluster, const SimOptions& options)
      : traces_(traces),
        c_(cluster),
        opt_(options),
        topo_(cluster.topology(static_cast<int>(traces.size()))),
        world_(static_cast<int>(traces.size())),
        procs_(traces.size()) {
    per_nic_ = std::max(1, topo_.gpus_per_node / c_.nics_per_node);
    ports_.resize(4 * static_cast<std::size_t>(world_));
    for (int p = 0; p < world_; ++p) {
      ports_[4 * p + 0].rate = ports_[4 * p + 1].rate = c_.gpu_link;
      ports_[4 * p + 2].rate = ports_[4 * p + 3].rate = c_.pcie;
    }
    const int nodes = (world_ + topo_.gpus_per_node - 1) / topo_.gpus_per_node;
    nics_ = nodes * c_.nics_per_node;
    ports_.resize(ports_.size() + 2 * static_cast<std::size_t>(nics_));
    for (int n = 0; n < 2 * nics_; ++n) ports_[4 * world_ + n].rate = c_.nic;
    busy_.assign(static_cast<std::size_t>(nodes), 0);
    if (opt_.cpu_cores > 0)  // rates measured with all N processes of a node busy: a full core is N / C of that
      for (int p = 0; p < world_; ++p) {
        const int n = topo_.node_of(p);
        const int on_node = std::min(topo_.gpus_per_node, world_ - n * topo_.gpus_per_node);
        const double full = std::max(1.0, static_cast<double>(on_node) / opt_.cpu_cores);
        ports_[4 * p + 0].rate *= full;
        ports_[4 * p + 1].rate *= full;
        full_core_.push_back(full);
      }
  }

  SimResult run() {
    for (int p = 0; p < world_; ++p) push({0, What::kWake, p, 0});
    while (!heap_.empty()) {
      const Entry e = heap_.top();
      heap_.pop();
      now_ = e.time;
      if (e.what == What::kWake)
        step(e.id);
      else if (e.what == What::kStart)
        start(e.id);
      else if (msgs_[e.id].version == e.version && !msgs_[e.id].done)
        end(e.id);
    }
    SimResult r;
    for (int p = 0; p < world_; ++p) {
      const auto& pr = procs_[p];
      DT_CHECK(pr.pc == traces_[p].events.size(), "process ", p, " stopped at event ", pr.pc, " of ",
               traces_[p].events.size(), " (a message it waits on was never posted by its peer)");
      if (pr.finish > r.seconds || p == 0) r.seconds = pr.finish, r.last_process = p;
      r.events += traces_[p].events.size();
    }
    const auto& last = procs_[r.last_process];
    r.last_copy_seconds = last.copy;
    r.last_wait_seconds = last.wait;
    double most = 0;
    r.critical_link = "none (copies only)";
    for (const auto& [port, w] : last.wait_by_port)
      if (w > most) most = w, r.critical_link = port_name(port);
    for (std::size_t i = 0; i < ports_.size(); ++i) {
      const double t = ports_[i].bytes / ports_[i].rate;
      if (t > r.busiest_link_seconds) {
        r.busiest_link_seconds = t;
        r.busiest_link_bytes = ports_[i].bytes;
        r.busiest_link = port_name(static_cast<int>(i));
      }
    }
    for (const auto& m : msgs_)
      if (!m.copy) ++r.messages, r.bytes += m.bytes;
    return r;
  }

 private:
  void push(Entry e) { heap_.push(e); }
  bool same_node(int a, int b) const { return topo_.node_of(a) == topo_.node_of(b); }
  int nic_port(int p, bool in) const {
    const int nic = topo_.node_of(p) * c_.nics_per_node + (p % topo_.gpus_per_node) / per_nic_;
    return 4 * world_ + 2 * nic + (in ? 1 : 0);
  }
  std::string port_name(int i) const {
    if (i >= 4 * world_) {
      const int nic = (i - 4 * world_) / 2;
      return "node " + std::to_string(nic / c_.nics_per_node) + " NIC " + std::to_string(nic % c_.nics_per_node) +
             ((i - 4 * world_) % 2 ? " in" : " out");
    }
    const int p = i / 4;
    static const char* const kKind[4] = {" link out", " link in", " PCIe out", " PCIe in"};
    return "node " + std::to_string(topo_.node_of(p)) + " GPU " + std::to_string(p % topo_.gpus_per_node) +
           kKind[i % 4];
  }

  // The message (src -> dst, wave, round), made on first sight by either side.
  int message(int src, int dst, int wave, std::uint32_t round, std::uint64_t bytes) {
    const auto key = std::make_tuple(src, dst, wave, round);
    auto [it, fresh] = index_.try_emplace(key, static_cast<int>(msgs_.size()));
    if (fresh) {
      Message m;
      m.src = src, m.dst = dst, m.bytes = bytes, m.remaining = static_cast<double>(bytes);
      if (same_node(src, dst)) {
        m.ports = {4 * src + 0, 4 * dst + 1};
      } else {
        m.ports = {4 * src + 2, nic_port(src, false), nic_port(dst, true), 4 * dst + 3};
      }
      msgs_.push_back(std::move(m));
    }
    DT_CHECK(msgs_[it->second].bytes == bytes, "message ", src, " -> ", dst, " wave ", wave, " round ", round,
             ": sender and receiver disagree on its size (", msgs_[it->second].bytes, " vs ", bytes, ")");
    return it->second;
  }
  void posted(int id) {
    Message& m = msgs_[id];
    if (m.started || m.send_post < 0 || m.recv_post < 0) return;
    m.started = true;
    const double latency = same_node(m.src, m.dst) ? c_.intra_latency : c_.inter_latency;
    push({std::max(m.send_post, m.recv_post) + latency, What::kStart, id, 0});
  }
  // Brings message `id` to now at its old rate, then gives it its new share.
  void rerate(int id) {
    Message& m = msgs_[id];
    m.remaining = std::max(0.0, m.remaining - m.rate * (now_ - m.last));
    m.last = now_;
    m.rate = 1e300;
    for (int p : m.ports) {
      const double share = ports_[p].rate / static_cast<double>(ports_[p].flows.size());
      if (share < m.rate) m.rate = share, m.bottleneck = p;
    }
    if (opt_.cpu_cores > 0 && !m.copy && procs_[m.copier].copying) {
      // No progress outside the transport: the copier moves the bytes inside its MPI calls.
      m.rate = 0;
      ++m.version;
      return;
    }
    if (opt_.cpu_cores > 0) {  // CPU time: a copy byte costs 1 / copy, a message byte 1 / link on its copier
      if (m.copy)
        m.rate = m.base * full_core_[m.src] * speed(m.src);
      else
        m.rate = std::min(m.rate, ports_[4 * m.copier].rate * message_share(m.copier));
    } else if (m.copy) {
      m.rate = m.base;
    }
    ++m.version;
    push({now_ + m.remaining / m.rate, What::kEnd, id, m.version});
  }
  void rerate_ports(const std::vector<int>& ports) {
    std::vector<int> touched;
    for (int p : ports) touched.insert(touched.end(), ports_[p].flows.begin(), ports_[p].flows.end());
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (int id : touched) rerate(id);
  }
  // The share of a core process p runs at (1 unless SimOptions::cpu_cores).
  double speed(int p) const {
    if (opt_.cpu_cores <= 0) return 1.0;
    return std::min(1.0, opt_.cpu_cores / std::max(1, busy_[topo_.node_of(p)]));
  }
  // The share of a core each message process p copies gets (equal time). While p copies
  // (pack, unpack, keep) its messages stall, so its copy runs at speed(p) alone.
  double message_share(int p) const {
    return speed(p) / std::max(1, procs_[p].active - static_cast<int>(procs_[p].copying));
  }
  // Who moves a message's bytes (comm/README.md, cross-memory attach): the receiver reads them,
  // unless the sender's runs are more than twice its own and at least 64 (the sender writes).
  static int copier_of(const Message& m) { return m.send_runs > 2 * m.recv_runs && m.send_runs >= 64 ? m.src : m.dst; }
  // Process p starts (+1) or ends (-1) a copy or message; true when shares of a core changed.
  bool activity(int p, int delta) {
    const bool was = procs_[p].active > 0;
    procs_[p].active += delta;
    const bool is = procs_[p].active > 0;
    busy_[topo_.node_of(p)] += static_cast<int>(is) - static_cast<int>(was);
    return opt_.cpu_cores > 0;
  }
  // After message id started or ended: new shares on its ports, or, when a node's busy count
  // changed (cpu_cores), for everything in flight.
  void rerate_after(int id, bool everything) {
    if (everything) {
      for (int f : inflight_) rerate(f);
      return;
    }
    rerate_ports(msgs_[id].ports);
    if (msgs_[id].copy && !msgs_[id].done) rerate(id);
  }
  void start(int id) {
    Message& m = msgs_[id];
    m.last = now_;
    if (!m.copy) {  // per-run work of a scattered message, as bytes at the measured link rate
      const std::uint32_t runs = std::max(m.send_runs, m.recv_runs);
      m.remaining += static_cast<double>(runs - 1) * opt_.run_seconds * c_.gpu_link;
    }
    for (int p : m.ports) {
      ports_[p].flows.push_back(id);
      ports_[p].bytes += m.bytes;
    }
    inflight_.insert(id);
    m.copier = m.copy ? m.src : copier_of(m);
    rerate_after(id, activity(m.copier, +1));
  }
  void end(int id) {
    Message& m = msgs_[id];
    m.done = true;
    for (int p : m.ports) {
      auto& f = ports_[p].flows;
      f.erase(std::find(f.begin(), f.end(), id));
    }
    inflight_.erase(id);
    if (m.copy) procs_[m.src].copying = false;
    rerate_after(id, activity(m.copier, -1));
    if (procs_[m.src].blocked_on == id) push({now_, What::kWake, m.src, 0});
    if (m.dst != m.src && procs_[m.dst].blocked_on == id) push({now_, What::kWake, m.dst, 0});
  }

  // Copies `bytes` at `rate` (a full core's) on process p: true when it takes time (p waits for
  // it as for a message, and wakes when it is over).
  bool busy(int p, double bytes, double rate) {
    if (bytes <= 0 || rate <= 0) return false;
    const int id = static_cast<int>(msgs_.size());
    Message m;
    m.src = m.dst = p, m.bytes = static_cast<std::uint64_t>(bytes), m.remaining = bytes;
    m.copy = true, m.base = rate, m.started = true;
    msgs_.push_back(std::move(m));
    procs_[p].blocked_on = id;
    procs_[p].blocked_since = now_;
    procs_[p].copying = true;
    start(id);
    return true;
  }
  // True when p must wait for message id.
  bool blocks(int p, int id) {
    if (msgs_[id].done) return false;
    procs_[p].blocked_on = id;
    procs_[p].blocked_since = now_;
    return true;
  }

  void step(int p) {
    Process& pr = procs_[p];
    if (pr.blocked_on >= 0) {
      const Message& b = msgs_[pr.blocked_on];
      if (b.copy) {
        pr.copy += now_ - pr.blocked_since;
      } else {
        pr.wait += now_ - pr.blocked_since;
        pr.wait_by_port[b.bottleneck] += now_ - pr.blocked_since;
      }
      pr.blocked_on = -1;
    }
    const auto& events = traces_[p].events;
    while (pr.pc < events.size()) {
      const ScheduleEvent& e = events[pr.pc];
      switch (e.kind) {
        case ScheduleEvent::Kind::kPost:
          if (pr.phase == 0) {  // pack first, then post
            pr.phase = 1;
            if (busy(p, static_cast<double>(e.pack_bytes), c_.copy)) return;
          }
          if (e.send_bytes > 0) {
            const int id = message(p, e.peer, e.wave, e.round, e.send_bytes);
            msgs_[id].send_post = now_;
            msgs_[id].send_runs = e.send_runs;
            posted(id);
          }
          if (e.recv_bytes > 0) {
            const int id = message(e.peer, p, e.wave, e.round, e.recv_bytes);
            msgs_[id].recv_post = now_;
            msgs_[id].recv_runs = e.recv_runs;
            posted(id);
          }
          break;
        case ScheduleEvent::Kind::kKeep:
          if (pr.phase == 0) {
            pr.phase = 1;
            if (busy(p, static_cast<double>(e.bytes), c_.copy)) return;
          }
          break;
        case ScheduleEvent::Kind::kFresh:
          if (pr.phase == 0) {
            pr.phase = 1;
            if (busy(p, static_cast<double>(e.bytes), opt_.fresh_rate)) return;
          }
          break;
        case ScheduleEvent::Kind::kWait: {
          const auto recv = index_.find({e.peer, p, e.wave, e.round});
          const auto send = index_.find({p, e.peer, e.wave, e.round});
          if (pr.phase == 0) {
            if (recv != index_.end() && blocks(p, recv->second)) return;
            pr.phase = 1;
            if (busy(p, static_cast<double>(e.unpack_bytes), c_.copy)) return;
          }
          if (send != index_.end() && blocks(p, send->second)) return;
          break;
        }
      }
      ++pr.pc;
      pr.phase = 0;
    }
    pr.finish = now_;
  }

  const std::vector<exec::ScheduleTrace>& traces_;
  const Cluster& c_;
  const SimOptions opt_;
  const plan::Topology topo_;
  const int world_;
  int per_nic_ = 1, nics_ = 0;
  std::vector<Port> ports_;
  std::vector<Message> msgs_;
  std::map<std::tuple<int, int, int, std::uint32_t>, int> index_;
  std::vector<Process> procs_;
  std::vector<int> busy_;          // per node: busy processes
  std::vector<double> full_core_;  // per process: a full core's rate over the measured (cpu_cores)
  std::set<int> inflight_;         // copies and messages in flight
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  double now_ = 0;
};

}  // namespace

SimResult simulate(const std::vector<exec::ScheduleTrace>& traces, const Cluster& cluster, const SimOptions& options) {
  return Simulation(traces, cluster, options).run();
}

Cluster calibrate_links(const std::vector<exec::ScheduleTrace>& traces, double measured, Cluster cluster,
                        const SimOptions& options) {
  DT_CHECK(measured > 0, "calibrate_links: measured time ", measured, " s is not positive");
  for (int i = 0; i < 6; ++i) {
    const double simulated = simulate(traces, cluster, options).seconds;
    if (simulated <= 0) break;  // nothing moves
    const double scale = std::clamp(simulated / measured, 0.1, 10.0);
    cluster.gpu_link *= scale, cluster.nic *= scale, cluster.pcie *= scale;
    if (std::abs(scale - 1) < 1e-6) break;
  }
  return cluster;
}

std::string format_sim(const SimResult& r) {
  char text[800];
  std::snprintf(text, sizeof text,
                "  predicted_seconds %.4g: process %d finishes last (%.3g s copying, %.3g s waiting, mostly on %s)\n"
                "  busiest link %s: %.3g s busy (utilisation %.2f); %llu messages, %.4g GB, %llu trace events\n",
                r.seconds, r.last_process, r.last_copy_seconds, r.last_wait_seconds, r.critical_link.c_str(),
                r.busiest_link.empty() ? "none" : r.busiest_link.c_str(), r.busiest_link_seconds, r.utilisation(),
                static_cast<unsigned long long>(r.messages), r.bytes / 1e9, static_cast<unsigned long long>(r.events));
  return text;
}

}  // namespace dynatrain::sim
