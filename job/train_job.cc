#include "job/train_job.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "testing/state_oracle.h"
#include "job/job_request.h"
#include "train/data.h"
#include "train/trainer.h"
#include "job/fault_injection.h"
#include "common/output_file.h"
#include "job/watchdog.h"
#include "job/train_ckpt.h"
#include "job/train_leader.h"
#include "job/train_memory.h"
#include "job/switch_probe.h"

namespace dynatrain::job {
using namespace dynatrain::train;  // the trainer this command drives


// parse_schedule: job/schedule.cc (no torch, so the fuzz target can build it).

namespace {

std::string plain(const std::string& config) {  // no commas, for CSV and gnuplot
  std::string s = config;
  for (auto& ch : s)
    if (ch == ',') ch = ' ';
  return s;
}

std::uint64_t model_parameters(const vps::ModelSpec& model) {
  std::uint64_t n = 0;
  for (const auto& t : vps::build_tensors(model)) n += static_cast<std::uint64_t>(t.numel());
  return n;
}

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || std::filesystem::equivalent(a, b, ec);
}

int default_threads() {
  int local = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(v));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / local);
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
  j["commit_cpu"] = {{"commit_thread_s", s.commit_cpu.commit_thread_s},
                     {"other_threads_s", s.commit_cpu.other_threads_s},
                     {"exchange_thread_s", s.commit_cpu.exchange_thread_s},
                     {"runqueue_s", s.commit_cpu.runqueue_s},
                     {"asleep_s", s.commit_cpu.asleep_s},
                     {"involuntary_switches", s.commit_cpu.involuntary_switches},
                     {"voluntary_switches", s.commit_cpu.voluntary_switches}};
  const auto& ph = s.phases;
  j["commit_phases_s"] = {{"carry", ph.carry},           {"engine_pack", ph.engine_pack},
                          {"engine_unpack", ph.engine_unpack}, {"engine_keep", ph.engine_keep},
                          {"engine_wait", ph.engine_wait},     {"engine_alloc", ph.engine_alloc},
                          {"engine_agree", ph.engine_agree},   {"free", ph.free},
                          {"grads", ph.grads},                 {"views", ph.views}};
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

int train_command(const TrainArgs& args, comm::Transport& world) {
  TrainerOptions o;
  o.model = vps::model_from_name(args.model);
  o.global_batch = args.global_batch;
  o.seq = args.seq;
  o.lr = args.lr;
  o.seed = args.seed;
  o.micro_batches = args.micro_batches;
  o.launcher = args.launcher;
  o.lookahead = args.lookahead;
  o.align_pages = args.align_pages;
  o.bf16 = args.bf16;
  if (args.placement == "fixed") o.placement = TrainerOptions::Placement::kFixed;
  else if (args.placement == "auto") o.placement = TrainerOptions::Placement::kAuto;
  else DT_INPUT_ERROR("unknown --placement '", args.placement, "'; valid: fixed, auto");
  if (args.switch_method == "gather") o.switch_method = SwitchMethod::kGather;
  else if (args.switch_method == "engine") o.switch_method = SwitchMethod::kEngine;
  else if (!args.switch_method.empty())
    DT_INPUT_ERROR("unknown switch method '", args.switch_method, "'; valid: engine, gather");
  if (args.steps <= 0) DT_INPUT_ERROR("--steps ", args.steps, " must be positive");
  if (args.lookahead < 0) DT_INPUT_ERROR("--lookahead ", args.lookahead, " must be 0 (auto) or positive");
  auto schedule = parse_schedule(args.schedule);
  if (args.static_layout) schedule.resize(1);
  // An entry at or past --steps could never run: refused, so a typo in a step is not a silent no-op.
  for (const auto& [step, config] : schedule)
    if (step >= args.steps)
      DT_INPUT_ERROR("schedule entry '", step, ":", config.str(), "' is at or past --steps ", args.steps,
                     " (steps 0..", args.steps - 1, "): it would never run");
  // A process started by a grow joins the running job instead of starting one (its own MPI
  // world holds only the processes started with it: the schedule's sizes do not apply to it).
  std::unique_ptr<comm::Transport> joined_world = args.launcher ? args.launcher->join() : nullptr;
  const bool joined = joined_world != nullptr;
  if (joined) fault_point("join", joined_world->rank());  // its starters still wait for it
  for (auto& [step, config] : schedule) {
    Trainer::check_supported(o, config);
    const bool first = step == schedule.front().first;
    if (!joined && config.world_size() > world.size() && (first || !args.launcher))
      DT_INPUT_ERROR("schedule layout '", config.str(), "' at step ", step, " needs ",
                     config.world_size(), " ranks; the job has ", world.size(),
                     first ? " (the first layout must fit the processes mpirun starts)"
                           : " and this run cannot start processes");
  }
  std::string text = args.data.empty() ? embedded_text() : read_text_file(args.data);
  if (static_cast<std::int64_t>(text.size()) < args.seq + 2)
    DT_INPUT_ERROR("training text has ", text.size(), " bytes; --seq ", args.seq, " needs at least ", args.seq + 2);
  set_intra_op_threads(args.threads > 0 ? args.threads : default_threads());

  if (!joined) check_train_memory(o, schedule, world);  // "needs X per rank, have Y", before allocating
  // The job's leader (job/train_leader.h): world rank 0 of the current world; the role moves
  // with rank 0 in a commit (take_over_as_leader below).
  bool leader = !joined && world.rank() == 0;
  bool tty = leader && isatty(fileno(stdout));
  LeaderState ls;  // the leader's state beyond the VPS state (meaningful on the leader only)
  std::ofstream csv, json_out;
  if (!joined && !comm::agree_with_root(world, !(leader && names_one_file(args.csv, args.json))))
    DT_INPUT_ERROR("--csv and --json both name '", args.csv, "'; give each its own file");
  if (leader && !args.csv.empty()) csv.open(args.csv);
  if (leader && !args.json.empty()) json_out.open(args.json);
  // Every rank learns whether rank 0 could open them, so all throw alike (no rank left waiting).
  if (!joined) {
    if (!comm::agree_with_root(world, args.csv.empty() || csv.is_open()))
      DT_INPUT_ERROR("cannot write CSV file '", args.csv, "'");
    if (!comm::agree_with_root(world, args.json.empty() || json_out.is_open()))
      DT_INPUT_ERROR("cannot write JSON file '", args.json, "'");
    if (!comm::agree_with_root(world, args.job.empty() || access(args.job.c_str(), W_OK) == 0))
      DT_INPUT_ERROR("job directory '", args.job, "' is not a writable directory");
  }
  if (csv.is_open()) {
    csv.precision(9);
    csv << "step,loss,tokens_per_s,step_s,layout,ranks,switch_plan_s,switch_transfer_s,"
           "switch_rebuild_s,switch_total_s,world,switch_pause_s\n";
  }
  if (leader)
    std::printf("dynatrain train: model %s, %lld steps, global batch %lld x %lld tokens, %d ranks, %s\n",
                o.model.name.c_str(), static_cast<long long>(args.steps),
                static_cast<long long>(args.global_batch), static_cast<long long>(args.seq),
                world.size(), args.static_layout || (schedule.size() == 1 && args.job.empty()) ? "static layout" : "switching layouts");
  if (leader)
    std::printf("state: %s%s\n", vps::bytes_per_parameter(train::trainer_elem_bytes(o.bf16)).c_str(),
                o.bf16 ? ", --bf16: bf16 weights, fp32 grads, master and Adam moments" : ", all fp32");
  // The lower bound of every switch divides by this point-to-point bandwidth, measured once.
  if (!joined && !args.json.empty()) ls.p2p_bytes_per_s = testing::measure_p2p_bandwidth(world, std::size_t{64} << 20);

  // Resuming: start at the checkpoint's step, in the schedule's layout for that step.
  std::optional<ckpt::Checkpoint> resume;
  std::int64_t first_step = 0;
  if (!args.resume_dir.empty() && !joined) {
    resume = ckpt::open_latest(args.resume_dir, o.model);
    first_step = resume->step;
    o.loaded_kinds = resume->kinds;  // the load overwrites them: no per-element init before it
    if (first_step >= args.steps)
      DT_INPUT_ERROR("checkpoint in '", args.resume_dir, "' is at step ", first_step, "; --steps ", args.steps,
                     " leaves nothing to train");
  }
  if (args.save_every < 0) DT_INPUT_ERROR("--save-every ", args.save_every, " must be >= 0");
  // Periodic saves; none at the step just resumed from, unless saving into another directory
  // (that first save is then the resumed state itself).
  const bool resumed_elsewhere = resume && !args.save_dir.empty() && !same_directory(args.save_dir, args.resume_dir);
  auto save_point = [&](std::int64_t s) {
    return !args.save_dir.empty() && args.save_every > 0 && s % args.save_every == 0 &&
           (s > first_step || resumed_elsewhere);
  };
  std::size_t first_layout = 1;
  while (first_layout < schedule.size() && schedule[first_layout].first <= first_step) ++first_layout;
  std::unique_ptr<Trainer> trainer =
      joined ? Trainer::join(o, std::move(joined_world), std::move(text))
             : std::make_unique<Trainer>(o, schedule[first_layout - 1].second, world, std::move(text));
  if (!args.json.empty()) trainer->set_switch_probe(std::make_shared<BenchmarkSwitchProbe>());  // link, bare exchange
  if (resume) resume_trainer(*resume, *trainer, world);
  // A peer that stops answering mid-switch ends the job (job/watchdog.h). The deadline covers
  // the whole model's state (weights, grads, fp32 master and two moments: 16 bytes a parameter).
  Watchdog watchdog;
  const double switch_deadline = switch_timeout_seconds(16 * static_cast<std::uint64_t>(model_parameters(o.model)));
  double slowest_step = 0;
  std::size_t next = first_layout;
  std::int64_t step = first_step;
  std::string preparing;  // layout being prepared, for the progress line

  // Switches that must vacate world ranks (requested with `dynatrain request --vacate`), by step:
  // the request's list ("1,3"), or kVacateAll (`--migrate`), which names the processes of the
  // world as it is when the switch is prepared (a grow before then adds its processes to it).
  std::map<std::int64_t, std::string> vacate_at;
  auto vacated_ranks = [&](std::int64_t at) -> std::vector<int> {
    const auto it = vacate_at.find(at);
    if (it == vacate_at.end()) return {};
    if (it->second != kVacateAll) return parse_rank_list(it->second);
    std::vector<int> all(static_cast<std::size_t>(trainer->world_size()));
    for (int r = 0; r < trainer->world_size(); ++r) all[static_cast<std::size_t>(r)] = r;
    return all;
  };
  // The schedule from entry `next` on, as a valid --schedule string (processes started by the
  // switch being prepared continue from it: it holds switches requested while running), then
  // "|STEP:R1,R2;..." for the switches among them that vacate ranks ("STEP:all": --migrate).
  auto rest_of_schedule = [&] {
    std::string s = "0:" + trainer->config().str(), v;
    for (std::size_t i = next; i < schedule.size(); ++i) {
      s += ";" + std::to_string(schedule[i].first) + ":" + schedule[i].second.str();
      if (auto it = vacate_at.find(schedule[i].first); it != vacate_at.end())
        v += (v.empty() ? "" : ";") + std::to_string(it->first) + ":" + it->second;
    }
    return v.empty() ? s : s + "|" + v;
  };
  auto adopt_rest_of_schedule = [&](const std::string& text) {  // the inverse, on another rank
    const auto bar = text.find('|');
    schedule = parse_schedule(text.substr(0, bar));
    vacate_at.clear();
    if (bar == std::string::npos) return;
    std::stringstream items(text.substr(bar + 1));
    std::string item;
    while (std::getline(items, item, ';')) {
      const auto colon = item.find(':');
      vacate_at[std::stoll(item.substr(0, colon))] = item.substr(colon + 1);
    }
  };
  auto maybe_prepare = [&] {
    if (next < schedule.size() && !trainer->preparing() && step + trainer->lookahead() >= schedule[next].first) {
      trainer->prepare(schedule[next].second, rest_of_schedule(), vacated_ranks(schedule[next].first));
      fault_point("prepare", trainer->world().rank());  // fires DELAY_MS into the background prepare
      preparing = schedule[next].second.str();
    }
  };
  // After a commit that gave rank 0 to this process: the old leader's state arrives in the
  // commit; the files continue in append mode (the old leader flushed them before the commit).
  auto take_over_as_leader = [&](const SwitchStats& sw) {
    DT_CHECK(sw.leader_moved, "world rank 0 changed process without a leader hand-over");
    ls = LeaderState::parse(sw.leader_state);
    adopt_rest_of_schedule(ls.schedule);
    next = 0;
    while (next < schedule.size() && schedule[next].first <= step) ++next;
    if (!args.csv.empty()) csv.open(args.csv, std::ios::app);
    if (!args.json.empty()) json_out.open(args.json);
    // Only this process knows; the error ends the job through the CLI's one failure path.
    if (!args.csv.empty() && !csv.is_open()) DT_INPUT_ERROR("the new leader cannot append to CSV file '", args.csv, "'");
    if (!args.json.empty() && !json_out.is_open()) DT_INPUT_ERROR("the new leader cannot write JSON file '", args.json, "'");
    csv.precision(9);
    tty = isatty(fileno(stdout));
    leader = true;
    std::printf("leader: process %d took over the job's I/O as world rank 0 before step %lld\n",
                static_cast<int>(getpid()), static_cast<long long>(step));
  };
  // After every commit (joined processes included): the leader role follows world rank 0, and
  // the leader reports the switch. Returns false when this process left the job.
  auto after_commit = [&](const SwitchStats& sw) {
    const bool leads = !trainer->left() && trainer->world().rank() == 0;
    if (!leads) leader = false;
    else if (!leader) take_over_as_leader(sw);
    else if (sw.leader_moved) DT_CHECK(false, "the leader kept world rank 0 in a commit that moved it");
    if (leader) {
      ls.records.push_back(switch_record(step, sw, ls.p2p_bytes_per_s));
      if (!sw.refused.empty()) {
        std::printf("switch before step %lld: %s -> %s refused: %s; training continues in %s\n",
                    static_cast<long long>(step), sw.from.c_str(), sw.to.c_str(), sw.refused.c_str(), sw.from.c_str());
      } else {
        std::printf("switch before step %lld: %s -> %s  processes %d -> %d  pause %.2f ms (transfer %.2f, "
                    "rebuild %.2f)  prepare %.2f ms (spawn %.2f) hidden %.0f%%  %llu new communicators  "
                    "(%s, %.2f MB sent, placement %s)\n",
                    static_cast<long long>(step), sw.from.c_str(), sw.to.c_str(), sw.world_before, sw.world_after,
                    sw.total_s * 1e3, sw.transfer_s * 1e3, sw.rebuild_s * 1e3, sw.prepare_s * 1e3,
                    sw.spawn_s * 1e3, sw.hidden_fraction * 100, static_cast<unsigned long long>(sw.comm_creations),
                    switch_method_name(sw.method), sw.bytes_sent / 1e6, sw.placement.c_str());
        if (!sw.note.empty()) std::printf("note: %s\n", sw.note.c_str());
      }
      std::fflush(stdout);
    }
    return !trainer->left();
  };
  auto commit = [&](SwitchStats& sw) {
    std::string handed;
    if (leader) {  // the leader's state, in case the commit moves rank 0 to another process
      csv.flush();
      ls.schedule = rest_of_schedule();
      handed = ls.serialize();
    }
    sw = trainer->commit(std::move(handed));
    preparing.clear();
    ++next;
    return after_commit(sw);
  };

  // A request from `dynatrain request` (rank 0 reads it and decides): the switch goes into the
  // schedule at its step, or as soon as it can be prepared; never before a switch already being
  // prepared. Rank 0 only; the others learn the schedule in sync_job().
  auto take_request = [&] {
    auto q = take_job_request(args.job);
    if (!q) return;
    vps::ParallelConfig config;
    std::vector<int> vacate;  // named ranks (`--migrate`: resolved when the switch is prepared)
    try {
      config = q->to.empty() ? trainer->config() : vps::ParallelConfig::parse(q->to);
      Trainer::check_supported(o, config);
      if (q->vacate != kVacateAll) vacate = parse_rank_list(q->vacate);
      for (int v : vacate)
        if (v >= trainer->world_size())
          DT_INPUT_ERROR("cannot vacate rank ", v, ": valid ranks are 0..", trainer->world_size() - 1);
    } catch (const InputError& e) {
      std::printf("request refused: %s; training continues in %s\n", e.what(), trainer->config().str().c_str());
      return;
    }
    std::int64_t at = q->at_step >= 0 ? q->at_step : step + trainer->lookahead();
    std::int64_t earliest = step + 1;
    if (trainer->preparing()) earliest = std::max(earliest, schedule[next].first + 1);
    at = std::max(at, earliest);
    if (at >= args.steps) {  // it would never run
      std::printf("request refused: a switch before step %lld is at or past --steps %lld; training continues in %s\n",
                  static_cast<long long>(at), static_cast<long long>(args.steps), trainer->config().str().c_str());
      return;
    }
    std::size_t i = next;
    while (i < schedule.size() && schedule[i].first < at) ++i;
    if (i < schedule.size() && schedule[i].first == at) schedule[i].second = config;
    else schedule.insert(schedule.begin() + static_cast<std::ptrdiff_t>(i), {at, config});
    if (q->vacate.empty()) vacate_at.erase(at);
    else vacate_at[at] = q->vacate;
    std::printf("request: switch to %s before step %lld%s\n", config.str().c_str(), static_cast<long long>(at),
                q->vacate.empty() ? "" : (", vacating ranks " + q->vacate).c_str());
  };
  // With --job, once per step after any commit: rank 0 takes a request and sends the schedule
  // (with the step) to the other ranks. Ranks of the current layout get it every step; ranks
  // outside it only when they have something to do before the next sync (a prepare, a commit,
  // a checkpoint) and otherwise wait here without spinning (a sleep-polled receive), as they
  // do in a prepare without --job. Returns false when rank 0 ends the run (kJobEnd).
  auto save_due = [&](std::int64_t s) {
    return !args.save_dir.empty() && args.save_every > 0 && s > first_step && s < args.steps && s % args.save_every == 0;
  };
  auto outside_needed = [&] {  // on rank 0: must ranks outside the layout run to the next sync?
    if (save_due(step + 1)) return true;
    if (next >= schedule.size()) return false;
    const std::int64_t at = schedule[next].first;
    if (trainer->preparing()) return at == step + 1 && step + 1 < args.steps;  // the next commit
    return step + trainer->lookahead() >= at ||                                // a prepare now
           (step + 1 < args.steps && step + 1 + trainer->lookahead() >= at);   // or next step
  };
  bool outside_waiting = false;  // rank 0: ranks outside the layout wait for a message
  auto sync_job = [&]() -> bool {
    comm::Transport& w = trainer->world();
    const int layout_ranks = trainer->config().world_size();
    if (w.rank() == 0) {
      take_request();
      const bool wake_outside = outside_needed();
      std::string body = rest_of_schedule();
      JobSync msg{kJobSchedule, step, body.size()};
      for (int r = 1; r < w.size(); ++r)
        if (r < layout_ranks || wake_outside) send_job_sync(w, r, msg, body);
      outside_waiting = !wake_outside;
      return true;
    }
    std::string body;
    const JobSync msg = receive_job_sync(w, body, /*sleep_poll=*/w.rank() >= layout_ranks);
    if (msg.kind == kJobEnd) return false;
    step = msg.step;
    adopt_rest_of_schedule(body);
    next = 1;  // entry 0 is the current layout
    return true;
  };
  auto end_job = [&] {  // the leader, after the last step: release ranks waiting in sync_job
    if (args.job.empty() || !leader || !outside_waiting) return;
    comm::Transport& w = trainer->world();
    for (int r = trainer->config().world_size(); r < w.size(); ++r)
      send_job_sync(w, r, JobSync{kJobEnd, step, 0}, {});
  };

  // A process started for a switch joins at its commit, which comes after that step's periodic
  // save (the old world saved it): it must not save that step again on its own.
  std::int64_t joined_at = -1;
  if (joined) {  // this process was started for the switch being prepared: commit it first
    const SwitchStats sw = trainer->commit();
    step = joined_at = trainer->steps_done();
    if (!trainer->joined_payload().empty()) adopt_rest_of_schedule(trainer->joined_payload());
    next = 0;
    while (next < schedule.size() && schedule[next].first <= step) ++next;
    if (!after_commit(sw)) return 0;  // (takes the leader role when the commit gave it rank 0)
  }
  for (; step < args.steps; ++step) {
    if (save_point(step) && step != joined_at) {
      csv.flush();  // a supervisor that restarts from this checkpoint keeps the rows before it
      save_trainer(args.save_dir, step, *trainer, trainer->world());
    }
    maybe_prepare();
    SwitchStats sw;
    bool switched = false;
    if (next < schedule.size() && schedule[next].first == step) {
      fault_point("switch", trainer->world().rank());
      // A peer that stops answering mid-switch ends the job (job/watchdog.h). Ranks the current
      // layout leaves idle wait for the active ones: only active ranks arm.
      if (trainer->active())
        watchdog.arm("the switch before step " + std::to_string(step), switch_deadline, [t = trainer.get()] {
          const int n = t->starting_processes();
          return n == 0 ? std::string() : "waiting for " + std::to_string(n) + " process(es) being started for it (MPI_Comm_spawn) that never joined";
        });
      switched = true;
      const bool stays = commit(sw);
      watchdog.disarm();
      if (!stays) break;
      maybe_prepare();
    }
    if (!args.job.empty()) {
      if (!sync_job()) break;
      maybe_prepare();
    }
    if (!trainer->active()) continue;  // wait in the next prepare / commit / finish
    const bool nan_loss = fault_point("step", trainer->world().rank());  // DT_FAULT=nan:...: test the stop below
    // A peer that stops answering mid-step ends the job too: the deadline is the watchdog's
    // floor plus 10x the slowest step so far (the first step, warm-up included, is not timed).
    if (slowest_step > 0) watchdog.arm("step " + std::to_string(step), switch_timeout_seconds(0) + 10 * slowest_step);
    const StepStats st = trainer->step();
    watchdog.disarm();
    // Every active rank has the loss: all stop alike, with the CSV rows before this step kept.
    if (const double loss = nan_loss ? std::nan("") : st.loss; !std::isfinite(loss)) {
      if (csv.is_open()) csv.flush();
      DT_INPUT_ERROR("the loss is ", loss, " at step ", step, ": training diverged; lower --lr (", args.lr, ")",
                     args.save_dir.empty() ? "" : " and --resume from the last checkpoint");
    }
    slowest_step = std::max(slowest_step, st.seconds);
    if (!leader) continue;
    const std::string layout = trainer->config().str();
    if (!switched) {  // the first step after a switch also pays for warm caches: not counted
      auto& t = ls.per_layout[layout];
      t.tokens += static_cast<double>(args.global_batch * args.seq);
      t.seconds += st.seconds;
      ++t.steps;
    }
    // One line per step. On a terminal it starts with a progress bar and ETA (no carriage
    // returns: Open MPI hands ranks a pty even when mpirun's output is piped to a file).
    std::string bar;
    if (tty) {
      const int width = 20, done = static_cast<int>(width * (step + 1) / args.steps);
      const double eta = st.seconds * static_cast<double>(args.steps - step - 1);
      char buf[96];
      std::snprintf(buf, sizeof(buf), "[%s%s] eta %4.0fs  ", std::string(done, '#').c_str(),
                    std::string(width - done, '.').c_str(), eta);
      bar = buf;
    }
    const std::string prep = preparing.empty() ? "" : "  (preparing " + preparing + ")";
    std::printf("%sstep %5lld  loss %.4f  %8.0f tok/s  %7.2f ms  %s  %d processes%s\n", bar.c_str(),
                static_cast<long long>(step), st.loss, st.tokens_per_s, st.seconds * 1e3, layout.c_str(),
                trainer->world_size(), prep.c_str());
    std::fflush(stdout);
    if (csv.is_open()) {
      csv << step << ',' << st.loss << ',' << st.tokens_per_s << ',' << st.seconds << ','
          << plain(layout) << ',' << trainer->config().world_size();
      const bool moved = switched && sw.refused.empty();
      if (moved) csv << ',' << sw.plan_s << ',' << sw.transfer_s << ',' << sw.rebuild_s << ',' << sw.total_s;
      else csv << ",,,,";
      csv << ',' << trainer->world_size() << ',';
      if (moved) csv << sw.total_s;
      csv << '\n';
      if (!csv) check_written(csv, "CSV", args.csv);  // a full disk ends the run at the row it lost
    }
  }
  if (csv.is_open()) check_written(csv, "CSV", args.csv);
  end_job();
  if (trainer->left()) {  // handed its state over in the last commit
    trainer.reset();
    if (args.launcher) args.launcher->leave();
    return 0;
  }
  if (!args.save_dir.empty()) save_trainer(args.save_dir, args.steps, *trainer, trainer->world());  // the final state
  trainer->finish();
  if (leader) {
    std::printf("summary: tokens/s by layout (steady state, first step after a switch excluded)\n");
    for (const auto& [layout, t] : ls.per_layout)
      if (t.steps > 0)
        std::printf("  %-28s %9.0f tok/s over %d steps\n", layout.c_str(), t.tokens / t.seconds, t.steps);
    for (const auto& r : ls.records)
      if (r["refused"].get<std::string>().empty())
        std::printf("  switch %s -> %s (%d -> %d processes): pause %.2f ms, prepare %.2f ms, hidden %.0f%%\n",
                    r["from"].get<std::string>().c_str(), r["to"].get<std::string>().c_str(),
                    r["world_before"].get<int>(), r["world_after"].get<int>(), r["pause_s"].get<double>() * 1e3,
                    r["prepare_s"].get<double>() * 1e3, r["hidden_fraction"].get<double>() * 100);
    if (json_out.is_open()) {
      json_out << nlohmann::json{{"switches", ls.records}}.dump(2) << '\n';
      check_written(json_out, "JSON", args.json);
    }
    std::fflush(stdout);
  }
  // Where processes may leave a running job, every process ends that way: MPI_Finalize can wait
  // (measured: sometimes for ever) for processes of its job that already left (docs/edm.md).
  // After a failed start the job must end through the launcher whether or not they may.
  const bool start_failed = args.launcher && args.launcher->start_failed();
  if (start_failed || (args.launcher && args.launcher->cannot_leave().empty())) {
    csv.close();
    json_out.close();
    trainer.reset();
    if (start_failed) args.launcher->end_after_failed_start(leader);
    args.launcher->leave();
  }
  return 0;
}

}  // namespace dynatrain::job
