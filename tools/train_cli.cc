#include "tools/train_cli.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "train/data.h"
#include "train/trainer.h"
#include "tools/fault_injection.h"
#include "tools/watchdog.h"

namespace dynatrain::tools {
using namespace dynatrain::train;  // the trainer this command drives


// parse_schedule: tools/schedule.cc (no torch, so the fuzz target can build it).

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

int default_threads() {
  int local = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(v));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / local);
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
  if (args.switch_method == "gather") o.switch_method = SwitchMethod::kGather;
  else if (args.switch_method == "engine") o.switch_method = SwitchMethod::kEngine;
  else if (!args.switch_method.empty())
    DT_INPUT_ERROR("unknown switch method '", args.switch_method, "'; valid: engine, gather");
  if (args.steps <= 0) DT_INPUT_ERROR("--steps ", args.steps, " must be positive");
  auto schedule = parse_schedule(args.schedule);
  if (args.static_layout) schedule.resize(1);
  for (auto& [step, config] : schedule) {
    Trainer::check_supported(o, config);
    if (config.world_size() > world.size())
      DT_INPUT_ERROR("schedule layout '", config.str(), "' at step ", step, " needs ",
                     config.world_size(), " ranks; the job has ", world.size(),
                     " (mpirun -np ", config.world_size(), " or more)");
  }
  std::string text = args.data.empty() ? embedded_text() : read_text_file(args.data);
  if (static_cast<std::int64_t>(text.size()) < args.seq + 2)
    DT_INPUT_ERROR("training text has ", text.size(), " bytes; --seq ", args.seq, " needs at least ", args.seq + 2);
  set_intra_op_threads(args.threads > 0 ? args.threads : default_threads());

  const bool root = world.rank() == 0;
  const bool tty = root && isatty(fileno(stdout));
  std::ofstream csv;
  if (root && !args.csv.empty()) csv.open(args.csv);
  // Every rank learns whether rank 0 could open it, so all throw alike (no rank left waiting).
  if (!comm::agree_with_root(world, args.csv.empty() || csv.is_open()))
    DT_INPUT_ERROR("cannot write CSV file '", args.csv, "'");
  if (csv.is_open()) {
    csv.precision(9);
    csv << "step,loss,tokens_per_s,step_s,layout,ranks,switch_plan_s,switch_transfer_s,"
           "switch_rebuild_s,switch_total_s\n";
  }
  if (root)
    std::printf("dynatrain train: model %s, %lld steps, global batch %lld x %lld tokens, %d ranks, %s\n",
                o.model.name.c_str(), static_cast<long long>(args.steps),
                static_cast<long long>(args.global_batch), static_cast<long long>(args.seq),
                world.size(), args.static_layout || schedule.size() == 1 ? "static layout" : "switching layouts");

  Trainer trainer(o, schedule[0].second, world, std::move(text));
  // A peer that stops answering mid-switch ends the job (tools/watchdog.h). The deadline covers
  // the whole model's state (weights, grads, fp32 master and two moments: 16 bytes a parameter).
  Watchdog watchdog;
  const double switch_deadline = switch_timeout_seconds(16 * static_cast<std::uint64_t>(model_parameters(o.model)));
  double slowest_step = 0;
  struct Tally { double tokens = 0, seconds = 0; int steps = 0; };
  std::map<std::string, Tally> per_layout;
  std::vector<SwitchStats> switches;
  std::size_t next = 1;
  for (std::int64_t step = 0; step < args.steps; ++step) {
    SwitchStats sw;
    bool switched = false;
    if (next < schedule.size() && schedule[next].first == step) {
      fault_point("switch", world.rank());
      // Ranks the current layout leaves idle wait inside switch_to for the active ones' steps:
      // only active ranks arm (their watchdog ends the job for everyone).
      if (trainer.active()) watchdog.arm("the switch before step " + std::to_string(step), switch_deadline);
      sw = trainer.switch_to(schedule[next].second);
      watchdog.disarm();
      switched = true;
      ++next;
      if (root) {
        switches.push_back(sw);
        std::printf("switch before step %lld: %s -> %s  plan %.2f ms  transfer %.2f ms  rebuild %.2f ms"
                    "  total %.2f ms  (%s, %.2f MB sent)\n",
                    static_cast<long long>(step), sw.from.c_str(), sw.to.c_str(),
                    sw.plan_s * 1e3, sw.transfer_s * 1e3, sw.rebuild_s * 1e3, sw.total_s * 1e3,
                    switch_method_name(sw.method), sw.bytes_sent / 1e6);
        std::fflush(stdout);
      }
    }
    if (!trainer.active()) continue;  // wait in the next switch_to / finish
    fault_point("step", world.rank());
    // A peer that stops answering mid-step ends the job too: the deadline is the watchdog's
    // floor plus 10x the slowest step so far (the first step, warm-up included, is not timed).
    if (slowest_step > 0) watchdog.arm("step " + std::to_string(step), switch_timeout_seconds(0) + 10 * slowest_step);
    const StepStats st = trainer.step();
    watchdog.disarm();
    slowest_step = std::max(slowest_step, st.seconds);
    if (!root) continue;
    const std::string layout = trainer.config().str();
    if (!switched) {  // the first step after a switch also pays for warm caches: not counted
      auto& t = per_layout[layout];
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
    std::printf("%sstep %5lld  loss %.4f  %8.0f tok/s  %7.2f ms  %s\n", bar.c_str(),
                static_cast<long long>(step), st.loss, st.tokens_per_s, st.seconds * 1e3, layout.c_str());
    std::fflush(stdout);
    if (csv.is_open()) {
      csv << step << ',' << st.loss << ',' << st.tokens_per_s << ',' << st.seconds << ','
          << plain(layout) << ',' << trainer.config().world_size();
      if (switched) csv << ',' << sw.plan_s << ',' << sw.transfer_s << ',' << sw.rebuild_s << ',' << sw.total_s;
      else csv << ",,,,";
      csv << '\n';
    }
  }
  trainer.finish();
  if (root) {
    std::printf("summary: tokens/s by layout (steady state, first step after a switch excluded)\n");
    for (const auto& [layout, t] : per_layout)
      if (t.steps > 0)
        std::printf("  %-28s %9.0f tok/s over %d steps\n", layout.c_str(), t.tokens / t.seconds, t.steps);
    for (const auto& s : switches)
      std::printf("  switch %s -> %s: %.2f ms (plan %.2f, transfer %.2f, rebuild %.2f)\n", s.from.c_str(),
                  s.to.c_str(), s.total_s * 1e3, s.plan_s * 1e3, s.transfer_s * 1e3, s.rebuild_s * 1e3);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace dynatrain::tools
