// A commit's report: every rank's figures (CommitFigures) gathered in one collective over the
// transition world and folded into SwitchStats on every rank. Invariants: every rank returns
// the same SwitchStats; timings are the max over ranks, the hidden share the min, bytes summed
// (and the busiest receiver's), memory at the rank closest to its bound. A SwitchProbe, when
// set, measures after the fold, on the same transition world.
#include <algorithm>
#include <map>
#include <utility>

#include "train/trainer_impl.h"

namespace dynatrain::train {

namespace {

// Max of each phase over ranks.
void fold_phases(const SwitchStats::Phases& fp, SwitchStats::Phases& ph) {
  for (auto [out, in] : {std::pair{&ph.carry, fp.carry},
                         {&ph.engine_pack, fp.engine_pack},
                         {&ph.engine_unpack, fp.engine_unpack},
                         {&ph.engine_keep, fp.engine_keep},
                         {&ph.engine_wait, fp.engine_wait},
                         {&ph.engine_alloc, fp.engine_alloc},
                         {&ph.engine_agree, fp.engine_agree},
                         {&ph.engine_system, fp.engine_system},
                         {&ph.engine_faults, fp.engine_faults},
                         {&ph.free, fp.free},
                         {&ph.grads, fp.grads},
                         {&ph.views, fp.views}})
    *out = std::max(*out, in);
}

// Max of each CPU figure over ranks; asleep = wall time neither on a core nor runnable.
void fold_cpu(const CommitFigures& f, SwitchStats::Cpu& c) {
  c.commit_thread_s = std::max(c.commit_thread_s, f.cpu.thread_s);
  c.other_threads_s = std::max(c.other_threads_s, f.cpu.other_threads_s());
  c.involuntary_switches = std::max(c.involuntary_switches, f.cpu.involuntary_switches);
  c.voluntary_switches = std::max(c.voluntary_switches, f.cpu.voluntary_switches);
  c.runqueue_s = std::max(c.runqueue_s, f.cpu.runqueue_s);
  c.asleep_s = std::max(c.asleep_s, std::max(0.0, f.total_s - f.cpu.thread_s - f.cpu.runqueue_s));
}

}  // namespace

void fold_commit_figures(const std::vector<CommitFigures>& all, SwitchStats& st) {
  st.hidden_fraction = 1;
  double first_start = 1e300, last_start = 0;
  for (const CommitFigures& f : all) {
    st.plan_s = std::max(st.plan_s, f.plan_s);
    st.transfer_s = std::max(st.transfer_s, f.transfer_s);
    st.rebuild_s = std::max(st.rebuild_s, f.rebuild_s);
    st.total_s = std::max(st.total_s, f.total_s);
    st.prepare_s = std::max(st.prepare_s, f.prepare_s);
    st.hidden_fraction = std::min(st.hidden_fraction, f.hidden);
    st.spawn_s = std::max(st.spawn_s, f.spawn_s);
    st.comm_creations = std::max(st.comm_creations, f.creations);
    fold_phases(f.phases, st.phases);
    st.bytes_sent += f.sent;
    st.bytes_received += f.received;
    st.max_bytes_received = std::max(st.max_bytes_received, f.received);
    st.fresh_bytes = std::max(st.fresh_bytes, f.fresh);
    st.prefaulted_bytes = std::max(st.prefaulted_bytes, f.prefaulted);
    st.peak_over_bound =
        std::max(st.peak_over_bound, f.bound > 0 ? static_cast<double>(f.peak) / static_cast<double>(f.bound) : 0.0);
    if (f.peak > st.peak_bytes || (f.peak == st.peak_bytes && f.bound < st.bound_bytes)) {
      st.peak_bytes = f.peak;
      st.bound_bytes = f.bound;
    }
    fold_cpu(f, st.commit_cpu);
    first_start = std::min(first_start, f.start);
    last_start = std::max(last_start, f.start);
    st.bytes_kept += f.kept[0];
    st.kept_remapped_bytes += f.kept[1];
    st.kept_zero_copy_bytes += f.kept[2];
  }
  st.start_spread_s = last_start - first_start;
}

// This rank's figures of the prepare completed, every rank's gathered and folded into `st`.
void Trainer::Impl::report_commit(comm::Transport& tw, const edm::Prepared& p, CommitFigures& mine, SwitchStats& st) {
  mine.prepare_s = p.seconds;
  mine.hidden = p.seconds > 0 ? p.hidden_seconds / p.seconds : 1.0;
  mine.spawn_s = p.spawn_seconds;
  mine.creations = p.creations;
  mine.job_id = opt.launcher ? opt.launcher->job_id() : 0;
  const std::vector<CommitFigures> all = comm::all_gather_values(tw, mine);
  fold_commit_figures(all, st);
  if (switch_probe) switch_probe->measure(tw, traffic(tw, all), st);
}

// The commit's traffic for the probe: per peer, the bytes of this rank's planned pieces (4 bytes
// an element, as the bare exchange has always counted them), the engine's chunk, and every
// rank's received bytes and launch.
SwitchTraffic Trainer::Impl::traffic(comm::Transport& tw, const std::vector<CommitFigures>& per_rank) const {
  SwitchTraffic t;
  const vps::ElemBytes eb = vps::fp32_elem_bytes();
  t.send_bytes.assign(static_cast<std::size_t>(tw.size()), 0);
  t.recv_bytes = t.send_bytes;
  auto add = [&](const std::map<int, std::vector<plan::Piece>>& side, std::vector<std::uint64_t>& bytes) {
    for (const auto& [peer, pieces] : side)
      for (const auto& p : pieces)
        if (peer != tw.rank()) bytes[static_cast<std::size_t>(peer)] += p.box.numel() * eb[static_cast<int>(p.kind)];
  };
  add(pending->plan.send, t.send_bytes);
  add(pending->plan.recv, t.recv_bytes);
  t.chunk_bytes = static_cast<std::size_t>(std::max<std::uint64_t>(pending->chunk_bytes, 4096));
  for (const CommitFigures& f : per_rank) {
    t.received.push_back(f.received);
    t.job_id.push_back(f.job_id);
  }
  return t;
}

}  // namespace dynatrain::train
