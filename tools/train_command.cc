// `dynatrain train`: flags only; job/train_job.h does the work.
#include <cstdlib>
#include <limits>

#include "edm/mpi_launcher.h"
#include "edm/store_launcher.h"
#ifdef DT_HAVE_C10D
#include "comm/c10d/c10d_membership.h"
#include "comm/c10d/c10d_recovery.h"
#endif
#include "edm/own_command.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "job/mpi_world.h"
#include "job/notice.h"
#include "job/supervisor.h"
#include "job/train_job.h"
#include "job/watchdog.h"

namespace dynatrain::tools {

namespace {

// On torch.distributed, where the launcher lets the survivors go on (torchrun, a scheduler,
// `dynatrain launch --keep-going`; not plain `dynatrain launch`, which ends every rank when one
// fails): a lost process is recovered in place (job/lost_peer.h). nullptr elsewhere.
std::shared_ptr<job::LostPeerSupport> lost_peer_support(const comm::Transport& world) {
#ifdef DT_HAVE_C10D
  const char* launch = std::getenv("DYNATRAIN_LAUNCH");
  if (!comm::is_c10d_world(world) || (launch != nullptr && std::string(launch) == "end")) return nullptr;
  auto s = std::make_shared<job::LostPeerSupport>();
  s->abandon = [] { return comm::abandon_c10d_groups(); };
  s->store = [](const comm::Transport& w) {
    return comm::c10d_key_store(w,
                                std::chrono::milliseconds(static_cast<std::int64_t>(job::watchdog_seconds() * 1000)));
  };
  s->world_keys = [](const comm::Transport& w) { return comm::c10d_world_name(w); };
  s->members_world = [](const comm::Transport& w, const std::string& key, const std::vector<int>& members) {
    return comm::c10d_members_world(w, key, members);
  };
  return s;
#else
  (void)world;
  return nullptr;
#endif
}

// DT_RENDEZVOUS_S (c10d_world_from_env refused a malformed one before), default 300 s.
std::chrono::milliseconds rendezvous_time() {
  const char* v = std::getenv("DT_RENDEZVOUS_S");
  const int seconds = v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 300;
  return std::chrono::seconds(seconds);
}

// On torch.distributed: processes join the job through its rendezvous store (a grow,
// edm/store_launcher.h). Every process of the job and every joiner must run the same arguments
// under the same lost-process rule (a recovery adds a barrier to each step).
std::shared_ptr<const edm::StoreMembership> store_membership(bool recovers, const std::string& executable) {
#ifdef DT_HAVE_C10D
  auto m = std::make_shared<edm::StoreMembership>();
  const auto wait = rendezvous_time();
  m->rendezvous = wait;
  m->executable = executable;
  m->job_store = [wait](const comm::Transport& w) { return comm::c10d_key_store(w, wait); };
  m->address = [](const comm::Transport& w) { return comm::c10d_store_address(w); };
  m->grown_world = [](const comm::Transport& w, const std::string& key, int size) {
    return comm::c10d_grown_world(w, key, size);
  };
  m->connect = [wait](const std::string& address) { return comm::c10d_connect_store(address, wait); };
  m->joined_world = [wait](const std::string& address, const std::string& key, int rank, int size) {
    return comm::c10d_joined_world(address, key, rank, size, wait);
  };
  for (const std::string& a : edm::own_arguments()) m->command += (m->command.empty() ? "" : " ") + a;
  m->command += recovers ? " (a lost process recovered in place: dynatrain launch --keep-going, torchrun)"
                         : " (a lost process ends the job: dynatrain launch without --keep-going)";
  return m;
#else
  (void)recovers;
  (void)executable;
  return nullptr;
#endif
}

// Checkpoints, notices and restarts: --save, --save-every, --resume, --notice-signal (into
// `notice_signal`), --notice-s, --max-restarts, --mpirun and --np (returned: whether it was given
// matters).
CLI::Option* add_recovery_flags(CLI::App* cmd, job::TrainArgs& args, job::SuperviseSettings& supervise,
                                std::string& notice_signal) {
  auto* save = cmd->add_option("--save", args.save_dir, "Checkpoint directory to save into (see --save-every)");
  cmd->add_option("--save-every", args.save_every, "Also save every N steps (0: only after the last step)")
      ->check(whole_number_in(std::int64_t{0}, std::int64_t{1'000'000'000}))
      ->needs(save)
      ->capture_default_str();
  cmd->add_option("--resume", args.resume_dir,
                  "Continue from this directory's latest checkpoint, in the schedule's layout for its step");
  cmd->add_option("--notice-signal", notice_signal,
                  "Signal that gives ONE process notice that it will be gone in --notice-s seconds: the "
                  "job vacates its ranks into a layout for the others and goes on (TERM, USR1, USR2, HUP, "
                  "or none: the signal stops the job)")
      ->capture_default_str();
  cmd->add_option("--notice-s", args.notice.seconds, "Seconds from a notice until the process is gone")
      ->check(positive_number_up_to(86400))
      ->capture_default_str();
  cmd->add_option("--max-restarts", supervise.max_restarts,
                  "With --np: restart the job from the last checkpoint, on one process fewer, up to K times "
                  "when a process dies")
      ->check(whole_number_in(0, 1000))
      ->capture_default_str();
  cmd->add_option("--redundancy", args.redundancy,
                  "With --max-restarts: copies of the state kept in shared memory at every step, so that a "
                  "restart loses no step: 1 (this node's), 2 (also each rank's buddy's: a lost node's state "
                  "too; job/memory_copy.h); 0: restart from --save. On torch.distributed with lost processes "
                  "recovered in place: 2 keeps each process's state in the memory of a process on another node")
      ->check(whole_number_in(0, 2))
      ->capture_default_str();
  cmd->add_flag("--recovery-reserve", args.recovery_reserve,
                "On torch.distributed with lost processes recovered in place (dynatrain launch --keep-going): "
                "each process keeps resident the memory a recovery from one more loss would add to it, so the "
                "recovery does not wait for fresh memory (it costs that memory for the whole job)");
  cmd->add_option("--mpirun", supervise.mpirun, "With --np: the mpirun to start the job with")->capture_default_str();
  return cmd
      ->add_option("--np", supervise.np,
                   "Start the job on N processes (run without mpirun: this process starts mpirun with "
                   "what Open MPI needs, job/supervisor.h)")
      ->check(whole_number_in(1, 131072));
}

// The optional knobs: --lr, --seed, --micro-batches, --switch-method, --bucket-elems, --threads.
void add_knobs(CLI::App* cmd, job::TrainArgs& args) {
  cmd->add_option("--lr", args.lr, "Adam learning rate")->check(positive_number_up_to(1e3))->capture_default_str();
  cmd->add_option("--seed", args.seed, "Seed for weights and data order")
      ->check(whole_number_in(std::uint64_t{0}, std::numeric_limits<std::uint64_t>::max()))
      ->capture_default_str();
  cmd->add_option("--micro-batches", args.micro_batches, "Pipeline micro-batches (0: auto)")
      ->check(whole_number_in(0, 1 << 20, " (0: auto)"))
      ->capture_default_str();
  cmd->add_option("--switch-method", args.switch_method, "engine (default) or gather");
  cmd->add_option("--bucket-elems", args.bucket_elems,
                  "ZeRO bucket size in elements: the flat buffers a zero>0 layout shards (Megatron's default is "
                  "40M; small buckets mean many small buffers, in 4 KiB pages, which switches move slower)")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--threads", args.threads, "Torch threads per rank (0: cores / local ranks)")
      ->check(whole_number_in(0, 4096, " (0: cores / local ranks)"))
      ->capture_default_str();
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto args = std::make_shared<job::TrainArgs>();
  auto launch = std::make_shared<edm::MpiLaunchSettings>();
  auto supervise_settings = std::make_shared<job::SuperviseSettings>();
  auto* cmd = app.add_subcommand(
      "train", "Train a model, switching layouts on a schedule (--np N starts the job; or run under mpirun)");
  cmd->add_option("--model", args->model, "tiny-dense, tiny-moe, or a Hugging Face config.json")->capture_default_str();
  cmd->add_option("--data", args->data, "Text file to train on (bytes are tokens); default: embedded text");
  cmd->add_option("--steps", args->steps, "Optimizer steps")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1'000'000'000}))
      ->capture_default_str();
  cmd->add_option("--global-batch", args->global_batch, "Sequences per step over all dp ranks")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--seq", args->seq, "Tokens per sequence")
      ->check(whole_number_in(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--schedule", args->schedule, "STEP:CONFIG;... e.g. \"0:tp=2,pp=2,dp=2;50:tp=1,pp=2,dp=4\"")
      ->capture_default_str();
  cmd->add_flag("--static", args->static_layout, "Run the schedule's first layout throughout");
  cmd->add_option("--csv", args->csv, "Write per-step figures to this CSV file");
  cmd->add_option("--json", args->json,
                  "Write one record per switch to this JSON file (each switch is then followed by a link probe and two "
                  "bare exchanges of its bytes, outside the pause)");
  cmd->add_option("--placement", args->placement,
                  "Which process takes which rank of a new layout: fixed (rank r on process r) or auto "
                  "(fewest bytes moved, rank 0 kept on process 0)");
  cmd->add_option("--lookahead", args->lookahead, "Steps between preparing a switch and committing it (0: auto)")
      ->check(whole_number_in(0, 1'000'000'000, " (0: auto)"))
      ->capture_default_str();
  cmd->add_option("--job", args->job, "Directory to watch for `dynatrain request` switch requests");
  cmd->add_flag("--align-pages,!--no-align-pages", args->align_pages,
                "Start every tensor of the state on a page boundary, so that switches move kept tensors "
                "by remapping pages instead of copying them; on by default, --no-align-pages (or "
                "--align-pages=false) packs them");
  cmd->add_flag("--bf16", args->bf16,
                "bf16 weights (computed with in bf16), fp32 gradients, fp32 master weights and Adam moments");
  cmd->add_option("--hostfile", launch->hostfile, "MPI hostfile for processes started by a grow")
      ->check(CLI::ExistingFile);
  cmd->add_option("--host", launch->hosts, "Hosts for processes started by a grow (h1,h2,...)");
  add_knobs(cmd, *args);
  auto notice_signal = std::make_shared<std::string>("TERM");
  auto* np_flag = add_recovery_flags(cmd, *args, *supervise_settings, *notice_signal);
  return [args, launch, supervise_settings, np_flag, notice_signal] {
    // The flags' values were checked while parsing (before MPI starts: identical on every rank,
    // printed once by rank 0).
    args->notice.signal = job::parse_notice_signal(*notice_signal);
    if (supervise_settings->max_restarts > 0 && np_flag->count() == 0)
      DT_INPUT_ERROR("--max-restarts needs --np N, the processes to start");
    if (np_flag->count() > 0) {  // the launcher: outside MPI, it starts mpirun
      supervise_settings->argv = job::train_argv_for_job();
      supervise_settings->hostfile = launch->hostfile;
      supervise_settings->hosts = launch->hosts;
      return job::supervise(*args, *supervise_settings);
    }
    // Notices from the start: a process a grow spawns can get one before it has joined (while
    // in MPI_Init), and must then be vacated, not end the job (job/notice.h).
    if (job::environment_names_world()) args->notice.deadline_end = job::kEnvWorldDeadlineEnd;
    job::enable_notices(args->notice);
    if (const char* exe = std::getenv("DT_EDM_EXECUTABLE")) launch->executable = exe;
    args->launcher = edm::make_mpi_launcher(*launch);
    return job::run_on_mpi_world([&](comm::Transport& world) {
      // A world from the environment (c10d): processes leave it and join it through its store
      // (edm/store_launcher.h).
      args->lost_peer = lost_peer_support(world);
      if (std::string(world.backend()) != "mpi")
        args->launcher = edm::make_store_launcher(store_membership(args->lost_peer != nullptr, launch->executable));
      else if (const char* join = std::getenv("DYNATRAIN_JOIN"); join != nullptr && *join != '\0')
        DT_INPUT_ERROR("DYNATRAIN_JOIN=", join,
                       " joins a job on torch.distributed, which needs the joining processes "
                       "started as a world of their own (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): start them with "
                       "`dynatrain launch --join ",
                       join, " --np K -- dynatrain train ...`");
      return job::train_command(*args, world);
    });
  };
}

}  // namespace dynatrain::tools
