// TrainJob's leader output: the switch and step lines, the CSV rows, the --json switch
// records and the summary; and the leader role, which follows world rank 0 through commits.
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "job/mpi_world.h"

#include "common/bytes.h"
#include "common/error.h"
#include "common/output_file.h"
#include "job/train_job_run.h"

namespace dynatrain::job {
using namespace dynatrain::train;  // the trainer this command drives

namespace {

std::string plain(const std::string& config) {  // no commas, for CSV and gnuplot
  std::string s = config;
  for (auto& ch : s)
    if (ch == ',') ch = ' ';
  return s;
}

nlohmann::json commit_cpu_record(const SwitchStats& s) {
  return {{"commit_thread_s", s.commit_cpu.commit_thread_s},
          {"other_threads_s", s.commit_cpu.other_threads_s},
          {"exchange_thread_s", s.commit_cpu.exchange_thread_s},
          {"runqueue_s", s.commit_cpu.runqueue_s},
          {"asleep_s", s.commit_cpu.asleep_s},
          {"involuntary_switches", s.commit_cpu.involuntary_switches},
          {"voluntary_switches", s.commit_cpu.voluntary_switches}};
}

nlohmann::json commit_phases_record(const SwitchStats& s) {
  const auto& ph = s.phases;
  return {{"carry", ph.carry},
          {"engine_pack", ph.engine_pack},
          {"engine_unpack", ph.engine_unpack},
          {"engine_keep", ph.engine_keep},
          {"engine_wait", ph.engine_wait},
          {"engine_alloc", ph.engine_alloc},
          {"engine_agree", ph.engine_agree},
          {"engine_system", ph.engine_system},
          {"engine_faults", ph.engine_faults},
          {"free", ph.free},
          {"grads", ph.grads},
          {"views", ph.views}};
}

// One JSON record per switch (docs/edm.md lists the fields).
nlohmann::json switch_record(std::int64_t step, const SwitchStats& s, double p2p_bytes_per_s) {
  nlohmann::json j;
  j["step"] = step;
  j["from"] = s.from;
  j["to"] = s.to;
  j["refused"] = s.refused;
  j["world_before"] = s.world_before;
  j["world_after"] = s.world_after;
  j["lookahead_steps"] = s.lookahead;
  j["prepare_s"] = s.prepare_s;
  j["spawn_s"] = s.spawn_s;
  j["hidden_fraction"] = s.hidden_fraction;
  j["pause_s"] = s.total_s;
  j["plan_s"] = s.plan_s;
  j["transfer_s"] = s.transfer_s;
  j["rebuild_s"] = s.rebuild_s;
  j["bytes_sent"] = s.bytes_sent;
  j["max_bytes_received"] = s.max_bytes_received;
  j["bytes_kept"] = s.bytes_kept;
  j["kept_remapped_bytes"] = s.kept_remapped_bytes;
  j["kept_zero_copy_bytes"] = s.kept_zero_copy_bytes;
  // The bound divides by the link the switch's bytes took (measured after its commit), or by
  // the run-start figure when that was not measured.
  const auto bound = [&](double rate) { return rate > 0 ? static_cast<double>(s.max_bytes_received) / rate : 0.0; };
  j["p2p_bytes_per_s"] = p2p_bytes_per_s;
  j["link_bytes_per_s"] = s.link_bytes_per_s;
  j["link_path"] = s.link_path;
  j["lower_bound_s"] = bound(s.link_bytes_per_s > 0 ? s.link_bytes_per_s : p2p_bytes_per_s);
  j["lower_bound_run_start_s"] = bound(p2p_bytes_per_s);
  j["exchange_s"] = s.exchange_s;
  j["start_spread_s"] = s.start_spread_s;
  j["commit_cpu"] = commit_cpu_record(s);
  j["commit_phases_s"] = commit_phases_record(s);
  j["peak_bytes"] = s.peak_bytes;
  j["bound_bytes"] = s.bound_bytes;
  j["peak_over_bound"] = s.peak_over_bound;
  j["prefaulted_bytes"] = s.prefaulted_bytes;
  j["fresh_bytes_in_commit"] = s.fresh_bytes;
  j["comm_creations"] = s.comm_creations;
  j["placement"] = s.placement;
  return j;
}

}  // namespace

// The leader's line of a recovery in place (train_job_recover.cc) and its JSON record: a switch's
// record with the recovery's own figures. Its bound: the survivors' groups built (their world
// and the layout's) plus the bare exchange of the rebuilt bytes (the probe's, with --json); the
// memory the rebuild adds to a process (made resident in the pause: no prepare ran ahead) is
// reported beside it, as the machine's fresh memory sets its own floor.
void TrainJob::report_recovery(const std::string& lost, const Trainer::Recovery& r, const RecoveryTimes& t) {
  const SwitchStats& sw = r.stats;
  const double groups = t.world_s + r.groups_s, bound = groups + sw.exchange_s;
  const std::string stopped =
      t.stopped > 0 ? detail::concat(", ", t.stopped, t.stopped == 1 ? " survivor" : " survivors", " stopped mid-step")
                    : "";
  const std::string completed =
      t.completed > 0 ? detail::concat("; step ", s_.step - 1, "'s update completed on ", t.completed,
                                       t.completed == 1 ? " survivor" : " survivors", " whose barrier met the loss")
                      : "";
  std::printf(
      "recovery: lost %s; %s -> %s on %d processes after a %.3f s pause (agree %.3f s%s, groups %.3f s, "
      "memory %.3f s for %s, move %.3f s, %s received)%s; step %lld again\n",
      lost.c_str(), sw.from.c_str(), sw.to.c_str(), sw.world_after, t.pause_s, t.agree_s, stopped.c_str(), groups,
      r.prefault_s, format_bytes(static_cast<double>(sw.prefaulted_bytes)).c_str(), sw.total_s,
      format_bytes(static_cast<double>(sw.max_bytes_received)).c_str(), completed.c_str(),
      static_cast<long long>(s_.step));
  nlohmann::json j = switch_record(s_.step, sw, s_.ls.p2p_bytes_per_s);
  j["recovery"] = {{"lost", lost},
                   {"pause_s", t.pause_s},
                   {"agree_s", t.agree_s},
                   {"stopped_mid_step", t.stopped},
                   {"completed_step", t.completed},
                   {"world_s", t.world_s},
                   {"groups_s", r.groups_s},
                   {"memory_s", r.prefault_s},
                   {"memory_bytes", sw.prefaulted_bytes},
                   {"move_s", sw.total_s},
                   {"bound_s", bound},
                   {"pause_over_bound", bound > 0 ? t.pause_s / bound : 0.0},
                   {"met_unix_s", t.met_unix_s},
                   {"resumed_unix_s", t.resumed_unix_s}};
  s_.ls.records.push_back(j);
  std::fflush(stdout);
}

// After every commit (joined processes included): the leader role follows world rank 0, and
// the leader reports the switch. Returns false when this process left the job.
bool TrainJob::after_commit(const SwitchStats& sw) {
  if (!trainer_->left()) {
    note_world_after_switch(trainer_->world());  // failure lines name world ranks
    note_layout_for_notices();
    reserve_for_recovery();
  }
  const bool leads = !trainer_->left() && trainer_->world().rank() == 0;
  if (!leads)
    s_.leader = false, control_.resign();
  else if (!s_.leader)
    take_over_as_leader(sw);
  else if (sw.leader_moved)
    DT_CHECK(false, "the leader kept world rank 0 in a commit that moved it");
  if (s_.leader) {
    s_.ls.records.push_back(switch_record(s_.step, sw, s_.ls.p2p_bytes_per_s));
    control_.switch_done(s_.step, s_.ls.records.back());
    report_switch(sw);
  }
  return !trainer_->left();
}

// After a commit that gave rank 0 to this process: the old leader's state arrives in the
// commit; the files continue in append mode (the old leader flushed them before the commit).
void TrainJob::take_over_as_leader(const SwitchStats& sw) {
  DT_CHECK(sw.leader_moved, "world rank 0 changed process without a leader hand-over");
  s_.ls = LeaderState::parse(sw.leader_state);
  control_.take_over(s_.ls.control, s_.step);
  adopt_rest_of_schedule(s_.ls.schedule);
  skip_past_entries();
  if (!args_.csv.empty()) s_.csv.open(args_.csv, std::ios::app);
  if (!args_.json.empty()) s_.json_out.open(args_.json);
  // Only this process knows; the error ends the job through the CLI's one failure path.
  if (!args_.csv.empty() && !s_.csv.is_open())
    DT_INPUT_ERROR("the new leader cannot append to CSV file '", args_.csv, "'");
  if (!args_.json.empty() && !s_.json_out.is_open())
    DT_INPUT_ERROR("the new leader cannot write JSON file '", args_.json, "'");
  s_.csv.precision(9);
  s_.tty = isatty(fileno(stdout));
  s_.leader = true;
  std::printf("leader: process %d took over the job's I/O as world rank 0 before step %lld\n",
              static_cast<int>(getpid()), static_cast<long long>(s_.step));
}

void TrainJob::report_switch(const SwitchStats& sw) const {
  const long long step = s_.step;
  if (!sw.refused.empty()) {
    std::printf("switch before step %lld: %s -> %s refused: %s; training continues in %s\n", step, sw.from.c_str(),
                sw.to.c_str(), sw.refused.c_str(), sw.from.c_str());
  } else {
    std::printf(
        "switch before step %lld: %s -> %s  processes %d -> %d  pause %.2f ms (transfer %.2f, "
        "rebuild %.2f)  prepare %.2f ms (spawn %.2f) hidden %.0f%%  %llu new communicators  "
        "(%s, %.2f MB sent, placement %s; engine %.3f s system, %.0f page faults)\n",
        step, sw.from.c_str(), sw.to.c_str(), sw.world_before, sw.world_after, sw.total_s * 1e3, sw.transfer_s * 1e3,
        sw.rebuild_s * 1e3, sw.prepare_s * 1e3, sw.spawn_s * 1e3, sw.hidden_fraction * 100,
        static_cast<unsigned long long>(sw.comm_creations), switch_method_name(sw.method), sw.bytes_sent / 1e6,
        sw.placement.c_str(), sw.phases.engine_system, sw.phases.engine_faults);
    if (!sw.note.empty()) std::printf("note: %s\n", sw.note.c_str());
  }
  std::fflush(stdout);
}

// The leader, after each step it took part in: the layout's tally, one line, one CSV row.
void TrainJob::report_step(const StepStats& st) {
  const std::string layout = trainer_->config().str();
  if (!s_.switched) {  // the first step after a switch also pays for warm caches: not counted
    auto& t = s_.ls.per_layout[layout];
    t.tokens += static_cast<double>(args_.global_batch * args_.seq);
    t.seconds += st.seconds;
    ++t.steps;
  }
  // On a terminal the line starts with a progress bar and ETA (no carriage returns: Open MPI
  // hands ranks a pty even when mpirun's output is piped to a file).
  std::string bar;
  if (s_.tty) {
    const int width = 20, done = static_cast<int>(width * (s_.step + 1) / args_.steps);
    const double eta = st.seconds * static_cast<double>(args_.steps - s_.step - 1);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "[%s%s] eta %4.0fs  ", std::string(done, '#').c_str(),
                  std::string(width - done, '.').c_str(), eta);
    bar = buf;
  }
  const std::string prep = s_.preparing.empty() ? "" : "  (preparing " + s_.preparing + ")";
  char line[512];
  std::snprintf(line, sizeof line, "step %5lld  loss %.4f  %8.0f tok/s  %7.2f ms  %s  %d processes",
                static_cast<long long>(s_.step), st.loss, st.tokens_per_s, st.seconds * 1e3, layout.c_str(),
                trainer_->world_size());
  s_.step_line = bar + line + prep;
  if (s_.progress)  // the supervisor's record of the step, printed with its line
    s_.step_line += "\n" + progress_line({ProgressRecord::Event::kStep, s_.step, trainer_->world_size(), layout, ""});
  if (s_.csv.is_open()) write_csv_row(st, layout);
  // A supervisor counts a step done by its record: with a memory copy the line waits for the copy
  // of the boundary after it, so that a loss in between never loses a step it saw done.
  if (!copy_point(s_.step + 1)) print_step_line();
}

void TrainJob::print_step_line() {
  if (s_.step_line.empty()) return;
  std::printf("%s\n", s_.step_line.c_str());
  std::fflush(stdout);
  s_.step_line.clear();
}

void TrainJob::write_csv_row(const StepStats& st, const std::string& layout) {
  auto& csv = s_.csv;
  csv << s_.step << ',' << st.loss << ',' << st.tokens_per_s << ',' << st.seconds << ',' << plain(layout) << ','
      << trainer_->config().world_size();
  const SwitchStats* moved = s_.switched && s_.switched->refused.empty() ? &*s_.switched : nullptr;
  if (moved)
    csv << ',' << moved->plan_s << ',' << moved->transfer_s << ',' << moved->rebuild_s << ',' << moved->total_s;
  else
    csv << ",,,,";
  csv << ',' << trainer_->world_size() << ',';
  if (moved) csv << moved->total_s;
  csv << '\n';
  if (!csv) check_written(csv, "CSV", args_.csv);  // a full disk ends the run at the row it lost
}

void TrainJob::print_summary() {
  std::printf("summary: tokens/s by layout (steady state, first step after a switch excluded)\n");
  for (const auto& [layout, t] : s_.ls.per_layout)
    if (t.steps > 0) std::printf("  %-28s %9.0f tok/s over %d steps\n", layout.c_str(), t.tokens / t.seconds, t.steps);
  for (const auto& r : s_.ls.records)
    if (r.contains("recovery"))
      std::printf("  recovery %s -> %s (%d -> %d processes, lost %s): pause %.2f ms\n",
                  r["from"].get<std::string>().c_str(), r["to"].get<std::string>().c_str(),
                  r["world_before"].get<int>(), r["world_after"].get<int>(),
                  r["recovery"]["lost"].get<std::string>().c_str(), r["recovery"]["pause_s"].get<double>() * 1e3);
    else if (r["refused"].get<std::string>().empty())
      std::printf("  switch %s -> %s (%d -> %d processes): pause %.2f ms, prepare %.2f ms, hidden %.0f%%\n",
                  r["from"].get<std::string>().c_str(), r["to"].get<std::string>().c_str(),
                  r["world_before"].get<int>(), r["world_after"].get<int>(), r["pause_s"].get<double>() * 1e3,
                  r["prepare_s"].get<double>() * 1e3, r["hidden_fraction"].get<double>() * 100);
  if (const MemoryCopyStats& c = s_.copy_stats; c.copies > 0)
    std::printf(
        "  memory copy (--redundancy %d): %d copies, the last %s of rank files%s; the first two (fresh "
        "pages) %.3f s, %.3f s, then %.3f s on average, at most %.3f s\n",
        args_.redundancy, c.copies, format_bytes(static_cast<double>(c.file_bytes)).c_str(),
        args_.redundancy >= 2 ? " and as much in buddy copies" : "", c.first_seconds[0], c.first_seconds[1],
        c.copies > 2 ? c.warm_seconds / (c.copies - 2) : 0.0, c.warm_max_seconds);
  if (lost_.refreshes > 0)
    std::printf(
        "  copies on another node (--redundancy 2): %s kept on rank 0, refreshed %d times, %.3f s on average, "
        "at most %.3f s\n",
        format_bytes(static_cast<double>(lost_.copy_bytes)).c_str(), lost_.refreshes, lost_.refresh_s / lost_.refreshes,
        lost_.refresh_max_s);
  if (s_.json_out.is_open()) {
    s_.json_out << nlohmann::json{{"switches", s_.ls.records}}.dump(2) << '\n';
    check_written(s_.json_out, "JSON", args_.json);
  }
  std::fflush(stdout);
}

}  // namespace dynatrain::job
