// TrainJob's set-up: flag and schedule checks, the output files, resume, the trainer.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/error.h"
#include "common/output_file.h"
#include "comm/probe.h"
#include "exec/machine_rates.h"
#include "exec/probe.h"
#include "job/fault_injection.h"
#include "job/mpi_world.h"
#include "job/train_ckpt.h"
#include "job/train_job_run.h"
#include "job/train_memory.h"
#include "job/switch_probe.h"
#include "train/data.h"

namespace dynatrain::job {
using namespace dynatrain::train;  // the trainer this command drives

namespace {

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

}  // namespace

// Every check that can refuse the run comes before the first file is opened or the first
// collective runs, raised alike on every rank.
bool TrainJob::set_up() {
  if (args_.recovery_reserve && !args_.lost_peer)
    throw InputError(
        "--recovery-reserve keeps memory for recovering a lost process in place, which needs a job on "
        "torch.distributed whose launcher lets the survivors go on (dynatrain launch --keep-going, torchrun); "
        "this job ends when a process is lost");
  if (args_.lost_peer && args_.redundancy == 1)
    throw InputError(
        "--redundancy 1 keeps a copy for a restart on this node; a job on torch.distributed recovers a lost "
        "process in place: valid are 0 (the replicas the survivors hold) and 2 (also a copy of each process's "
        "state kept by a process on another node)");
  build_options();
  load_schedule();
  // This machine's memory rates (the keep path's choice, exec/machine_rates.h) are measured
  // once per process: here, before any switch, so that no pause pays for them.
  exec::machine_rates();
  // A process started by a grow joins the running job instead of starting one (its own MPI
  // world holds only the processes started with it: the schedule's sizes do not apply to it).
  std::unique_ptr<comm::Transport> joined_world = args_.launcher ? args_.launcher->join() : nullptr;
  const bool joined = joined_world != nullptr;
  if (joined) fault_point("join", joined_world->rank());  // its starters still wait for it
  check_layouts(joined);
  std::string text = load_text();
  set_intra_op_threads(args_.threads > 0 ? args_.threads : default_threads());
  // Checkpoints carry the run's identity; --save is checked before anything trains.
  s_.run = run_identity(args_, o_.model, text);
  if (!joined) {
    std::string refused = world_.rank() == 0 ? save_dir_problem(args_, s_.run, o_.model) : "";
    comm::broadcast_string(world_, refused);
    if (!refused.empty()) throw InputError(refused);
  }
  if (memory_copy_redundancy() > 0 && !joined)
    if (std::string why = memory_copy_problem(args_.redundancy, world_); !why.empty()) throw InputError(why);
  if (!joined) check_train_memory(o_, s_.schedule, world_);  // "needs X per rank, have Y", before allocating
  s_.leader = !joined && world_.rank() == 0;
  s_.tty = s_.leader && isatty(fileno(stdout));
  s_.progress = progress_records_wanted();  // a bad version is refused at the start
  if (!joined) open_outputs();
  print_banner();
  // The lower bound of every switch divides by this point-to-point bandwidth, measured once.
  if (!joined && !args_.json.empty())
    s_.ls.p2p_bytes_per_s = comm::measure_p2p_bandwidth(world_, std::size_t{64} << 20);
  std::optional<ckpt::Checkpoint> resume;
  if (!joined) resume = open_resume();
  if (args_.save_every < 0) DT_INPUT_ERROR("--save-every ", args_.save_every, " must be >= 0");
  // Periodic saves; none at the step just resumed from, unless saving into another directory
  // (that first save is then the resumed state itself).
  s_.resumed_elsewhere = resume && !args_.save_dir.empty() && !same_directory(args_.save_dir, args_.resume_dir);
  if (memory_copy_redundancy() > 0) {
    s_.copy_dir = memory_copy_dir();
    s_.resumed_from_copy = resume && !s_.copy_dir.empty() && same_directory(args_.resume_dir, s_.copy_dir);
  }
  start_trainer(std::move(joined_world), std::move(text), resume);
  if (memory_copy_redundancy() > 0 && !joined)  // before the first step: room for the copies
    if (std::string why = memory_copy_room_problem(args_.redundancy, copied_state_bytes(trainer_->layout()));
        !why.empty())
      throw InputError(why);
  if (!joined) return true;
  // This process was started for the switch being prepared: it commits that switch first. A
  // process started for a switch joins at its commit, which comes after that step's periodic
  // save (the old world saved it): it must not save that step again on its own.
  const SwitchStats sw = trainer_->commit();
  s_.step = s_.joined_at = trainer_->steps_done();
  if (!trainer_->joined_payload().empty()) adopt_rest_of_schedule(trainer_->joined_payload());
  skip_past_entries();
  return after_commit(sw);  // (takes the leader role when the commit gave it rank 0)
}

void TrainJob::build_options() {
  o_.model = vps::model_from_name(args_.model);
  o_.global_batch = args_.global_batch;
  o_.seq = args_.seq;
  o_.lr = args_.lr;
  o_.seed = args_.seed;
  o_.micro_batches = args_.micro_batches;
  o_.bucket_elems = args_.bucket_elems;
  o_.launcher = args_.launcher;
  o_.commit_barrier = args_.lost_peer != nullptr;  // a lost process is recovered: no half-applied step
  if (args_.lost_peer) {
    o_.interrupt = &lost_.interrupt;  // its survivors stop computing when one meets it
    o_.after_commit_barrier = [this] { fault_point("barrier", trainer_->world().rank()); };
  }
  o_.lookahead = args_.lookahead;
  o_.align_pages = args_.align_pages;
  o_.bf16 = args_.bf16;
  if (args_.placement == "fixed")
    o_.placement = TrainerOptions::Placement::kFixed;
  else if (args_.placement == "auto")
    o_.placement = TrainerOptions::Placement::kAuto;
  else
    DT_INPUT_ERROR("unknown --placement '", args_.placement, "'; valid: fixed, auto");
  if (args_.switch_method == "gather")
    o_.switch_method = SwitchMethod::kGather;
  else if (args_.switch_method == "engine")
    o_.switch_method = SwitchMethod::kEngine;
  else if (!args_.switch_method.empty())
    DT_INPUT_ERROR("unknown switch method '", args_.switch_method, "'; valid: engine, gather");
  if (args_.steps <= 0) DT_INPUT_ERROR("--steps ", args_.steps, " must be positive");
  if (args_.lookahead < 0) DT_INPUT_ERROR("--lookahead ", args_.lookahead, " must be 0 (auto) or positive");
}

void TrainJob::load_schedule() {
  s_.schedule = parse_schedule(args_.schedule);
  if (args_.static_layout) s_.schedule.resize(1);
  // An entry at or past --steps could never run: refused, so a typo in a step is not a silent no-op.
  for (const auto& [step, config] : s_.schedule)
    if (step >= args_.steps)
      DT_INPUT_ERROR("schedule entry '", step, ":", config.str(), "' is at or past --steps ", args_.steps,
                     " (steps 0..", args_.steps - 1, "): it would never run");
}

void TrainJob::check_layouts(bool joined) {
  for (auto& [step, config] : s_.schedule) {
    Trainer::check_supported(o_, config);
    const bool first = step == s_.schedule.front().first;
    if (!joined && config.world_size() > world_.size() && (first || !args_.launcher))
      DT_INPUT_ERROR("schedule layout '", config.str(), "' at step ", step, " needs ", config.world_size(),
                     " ranks; the job has ", world_.size(),
                     first ? detail::concat(" (the first layout must fit the processes the job starts with: `dynatrain "
                                            "train --np ",
                                            config.world_size(), " ...`)")
                           : std::string(" and this run cannot start processes"));
  }
}

std::string TrainJob::load_text() const {
  std::string text = args_.data.empty() ? embedded_text() : read_text_file(args_.data);
  if (static_cast<std::int64_t>(text.size()) < args_.seq + 2)
    DT_INPUT_ERROR("training text has ", text.size(), " bytes; --seq ", args_.seq, " needs at least ", args_.seq + 2);
  return text;
}

// Collective over the starting world: rank 0 opens the files (and checks --job DIR), and every
// rank learns whether it could, so all throw alike (no rank left waiting).
void TrainJob::open_outputs() {
  comm::Transport& world = world_;
  if (!comm::agree_with_root(world, !(s_.leader && names_one_file(args_.csv, args_.json))))
    DT_INPUT_ERROR("--csv and --json both name '", args_.csv, "'; give each its own file");
  if (s_.leader && !args_.csv.empty()) s_.csv.open(args_.csv);
  if (s_.leader && !args_.json.empty()) s_.json_out.open(args_.json);
  if (!comm::agree_with_root(world, args_.csv.empty() || s_.csv.is_open()))
    DT_INPUT_ERROR("cannot write CSV file '", args_.csv, "'");
  if (!comm::agree_with_root(world, args_.json.empty() || s_.json_out.is_open()))
    DT_INPUT_ERROR("cannot write JSON file '", args_.json, "'");
  if (!comm::agree_with_root(world, args_.job.empty() || access(args_.job.c_str(), W_OK) == 0))
    DT_INPUT_ERROR("job directory '", args_.job, "' is not a writable directory");
  const std::string held = s_.leader ? control_.start({{"model", o_.model.name},
                                                       {"steps", args_.steps},
                                                       {"schedule", args_.schedule},
                                                       {"processes", world.size()}})
                                     : "";
  if (!comm::agree_with_root(world, held.empty()))
    DT_INPUT_ERROR(s_.leader ? held : "rank 0 cannot take job directory '" + args_.job + "'");
  if (s_.csv.is_open()) {
    s_.csv.precision(9);
    s_.csv << "step,loss,tokens_per_s,step_s,layout,ranks,switch_plan_s,switch_transfer_s,"
              "switch_rebuild_s,switch_total_s,world,switch_pause_s\n";
  }
}

void TrainJob::print_banner() const {
  if (!s_.leader) return;
  if (args_.launcher) note_mpirun_environment(s_.schedule, !args_.job.empty());  // a plain mpirun's gaps
  const bool switching = !(args_.static_layout || (s_.schedule.size() == 1 && args_.job.empty()));
  std::printf("dynatrain train: model %s, %lld steps, global batch %lld x %lld tokens, %d ranks, %s\n",
              o_.model.name.c_str(), static_cast<long long>(args_.steps), static_cast<long long>(args_.global_batch),
              static_cast<long long>(args_.seq), world_.size(), switching ? "switching layouts" : "static layout");
  std::printf("state: %s%s\n", vps::bytes_per_parameter(train::trainer_elem_bytes(o_.bf16)).c_str(),
              o_.bf16 ? ", --bf16: bf16 weights, fp32 grads, master and Adam moments" : ", all fp32");
}

// Resuming: start at the checkpoint's step, in the schedule's layout for that step.
std::optional<ckpt::Checkpoint> TrainJob::open_resume() {
  if (args_.resume_dir.empty()) return std::nullopt;
  std::optional<ckpt::Checkpoint> resume = ckpt::open_latest(args_.resume_dir, o_.model);
  s_.first_step = resume->step;
  o_.loaded_kinds = resume->kinds;  // the load overwrites them: no per-element init before it
  if (rebuilds_params(o_.loaded_kinds)) o_.loaded_kinds.push_back(vps::StateKind::kParam);
  if (s_.first_step >= args_.steps)
    DT_INPUT_ERROR("checkpoint in '", args_.resume_dir, "' is at step ", s_.first_step, "; --steps ", args_.steps,
                   " leaves nothing to train");
  return resume;
}

void TrainJob::start_trainer(std::unique_ptr<comm::Transport> joined_world, std::string text,
                             const std::optional<ckpt::Checkpoint>& resume) {
  std::size_t first_layout = 1;
  while (first_layout < s_.schedule.size() && s_.schedule[first_layout].first <= s_.first_step) ++first_layout;
  trainer_ = joined_world
                 ? Trainer::join(o_, std::move(joined_world), std::move(text))
                 : std::make_unique<Trainer>(o_, s_.schedule[first_layout - 1].second, world_, std::move(text));
  if (!args_.json.empty()) trainer_->set_switch_probe(std::make_shared<BenchmarkSwitchProbe>());  // link, bare exchange
  if (resume) resume_trainer(*resume, *trainer_, world_);
  // A peer that stops answering mid-switch ends the job (job/watchdog.h). The deadline covers
  // the whole model's state (weights, grads, fp32 master and two moments: 16 bytes a parameter).
  switch_deadline_ = switch_timeout_seconds(16 * static_cast<std::uint64_t>(model_parameters(o_.model)));
  s_.next = first_layout;
  s_.step = s_.first_step;
  if (args_.lost_peer) {  // before any loss: the store's host may be lost later (a joiner's: the job's store)
    lost_.store = args_.lost_peer->store(trainer_->world());
    lost_.watch = std::make_unique<LossWatch>(args_.lost_peer->store(trainer_->world()), lost_.interrupt);
  }
  reserve_for_recovery();
}

}  // namespace dynatrain::job
