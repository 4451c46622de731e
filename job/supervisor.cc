#include "job/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "common/error.h"
#include "common/output_file.h"
#include "job/attempt_processes.h"
#include "job/job_events.h"
#include "job/memory_copy.h"
#include "job/job_status.h"
#include "job/notice.h"
#include "job/progress_record.h"
#include "job/supervisor_job_dir.h"
#include "job/survivor_layout.h"
#include "job/train_ckpt.h"
#include "train/data.h"

namespace dynatrain::job {

namespace fs = std::filesystem;

namespace {

// ---- the command line ----

// Removes `flag` (and its value, when it takes one) in both "--flag value" and "--flag=value" forms.
std::vector<std::string> without_flag(const std::vector<std::string>& argv, const std::string& flag, bool has_value) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag) {
      if (has_value) ++i;
      continue;
    }
    if (has_value && argv[i].rfind(flag + "=", 0) == 0) continue;
    out.push_back(argv[i]);
  }
  return out;
}

// ---- one attempt: mpirun as a child, its stdout passed through and read for progress ----

volatile sig_atomic_t g_signal = 0;
volatile pid_t g_child = 0;

void forward_signal(int sig) {
  g_signal = sig;
  if (g_child > 0) kill(g_child, sig);
}

struct Attempt {
  int exit_code = 0;
  bool mpirun_killed = false;  // mpirun itself ended by a signal (it could not end its workers)
  // From the job's progress records (job/progress_record.h), never from its human lines:
  std::int64_t last_step = -1;         // the last step rank 0 reported done (-1: none)
  int processes = 0;                   // the job's processes at that step (0: no step reported)
  std::string layout;                  // the layout of that step ("" : no step reported)
  bool every_process_noticed = false;  // the job ended on a notice to all (job/notice.h)
  bool bad_record = false;             // a record did not read (said once)
};

// Seconds the workers an mpirun left behind get to go after SIGKILL (a process in the kernel).
constexpr double kOrphansDeadlineS = 30;

// Workers left running by an mpirun that died first are ended before anything reads the
// attempt's files: they would go on writing the memory copy, --save and the CSV. An mpirun that
// exited by itself signaled its workers first: those still exiting get a second to go.
void end_orphans_of(const Attempt& a) {
  const std::vector<pid_t> orphans = end_attempt_orphans(kOrphansDeadlineS, a.mpirun_killed ? 0.0 : 1.0);
  if (orphans.empty()) return;
  std::string pids;
  for (pid_t p : orphans) pids += (pids.empty() ? "" : " ") + std::to_string(p);
  std::printf("supervise: mpirun ended with exit %d leaving %zu processes of the job running (pids %s); ended them\n",
              a.exit_code, orphans.size(), pids.c_str());
  std::fflush(stdout);
}

// One line of the job's stdout: a progress record (job/progress_record.h) is read into `a` and
// kept out of the output; any other line passes through. A record that does not read is said
// once on stderr and not counted.
void pass_line(const std::string& line, Attempt& a) {
  std::optional<ProgressRecord> r;
  try {
    r = parse_progress_line(line);
  } catch (const InputError& e) {
    if (!a.bad_record)
      std::fprintf(stderr, "dynatrain: warning: supervise: %s; the restart accounting leaves it out\n", e.what());
    a.bad_record = true;
    return;
  }
  if (!r) {
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
  } else if (r->event == ProgressRecord::Event::kEveryProcessNoticed) {
    a.every_process_noticed = true;
  } else {
    a.last_step = r->step;
    a.processes = r->processes;
    a.layout = r->layout;
  }
}

Attempt run_job(const std::vector<std::string>& cmd) {
  int out[2];
  if (pipe(out) != 0) DT_INPUT_ERROR("cannot create a pipe for the job: ", std::strerror(errno));
  std::fflush(stdout);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) DT_INPUT_ERROR("cannot start '", cmd.front(), "': ", std::strerror(errno));
  if (pid == 0) {
    terminate_with_parent(parent);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "dynatrain: error: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    _exit(2);
  }
  g_child = pid;
  close(out[1]);
  Attempt a;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    for (std::size_t eol; (eol = pending.find('\n')) != std::string::npos; pending.erase(0, eol + 1))
      pass_line(pending.substr(0, eol + 1), a);
  }
  if (!pending.empty()) pass_line(pending, a);  // the last line, without its newline
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  a.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  a.mpirun_killed = WIFSIGNALED(status);
  end_orphans_of(a);
  return a;
}

// A worker ended by the notice signal before any step line (mpirun's 128 + signal): the signal
// came before the worker's notice handler was installed (while the program loads), so it took
// the signal's default action and nothing printed a line for it.
void say_start_up_signal(const Attempt& a, int notice_signal) {
  if (g_signal || notice_signal == 0 || a.last_step >= 0 || a.exit_code != 128 + notice_signal) return;
  std::fprintf(stderr,
               "dynatrain: error: a process of the job ended by %s before training started (a notice during "
               "start-up, before the process could take notices?)\n",
               notice_signal_name(notice_signal));
  std::fflush(stderr);
}

// ---- the CSV: every step once, from the attempt that kept it ----

struct CsvPart {
  std::string path;
  std::int64_t keep_below = INT64_MAX;  // rows of later steps were trained again by the next attempt
  int restart = 0;                      // this attempt's number (0: the first)
  std::int64_t steps_lost = 0;          // lost by the attempt before it
};

void assemble_csv(const std::string& out_path, const std::vector<CsvPart>& parts) {
  std::ofstream out(out_path);
  if (!out) DT_INPUT_ERROR("cannot write CSV file '", out_path, "'");
  bool header = false;
  std::string mark;  // restart columns waiting for the next row written
  for (const auto& p : parts) {
    if (p.restart > 0) mark = std::to_string(p.restart) + "," + std::to_string(p.steps_lost);
    std::ifstream in(p.path);
    std::string line;
    if (!std::getline(in, line)) continue;
    if (!header) out << line << ",restart,steps_lost\n";
    header = true;
    while (std::getline(in, line)) {
      if (line.empty() || std::stoll(line) >= p.keep_below) continue;
      out << line << ',' << (mark.empty() ? "," : mark) << '\n';
      mark.clear();
    }
  }
  check_written(out, "CSV", out_path);  // the attempts' files stay when the assembled one is short
  for (const auto& p : parts) fs::remove(p.path);
}

}  // namespace

vps::ParallelConfig choose_restart_layout(const train::TrainerOptions& options, const vps::ParallelConfig& previous,
                                          int processes) {
  const auto chosen = survivor_layout(previous, processes, [&](vps::ParallelConfig c) {
    try {
      train::Trainer::check_supported(options, c);
      return true;
    } catch (const InputError&) {
      return false;
    }
  });
  if (chosen) return *chosen;
  DT_INPUT_ERROR("no layout of ", processes, " or fewer processes can train model '", options.model.name,
                 "' with global batch ", options.global_batch);
}

std::vector<std::string> train_argv_for_job() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string a; std::getline(in, a, '\0');) argv.push_back(a);
  std::size_t train = 1;
  while (train < argv.size() && argv[train] != "train") ++train;
  std::vector<std::string> out(argv.begin() + static_cast<std::ptrdiff_t>(std::min(train + 1, argv.size())),
                               argv.end());
  out = without_flag(out, "--max-restarts", true);
  out = without_flag(out, "--np", true);
  return without_flag(out, "--mpirun", true);
}

namespace {

// What Open MPI needs for a job whose processes leave and join (scripts/mpi-env.sh sets the
// same for a plain mpirun), set for the mpirun this process starts unless already set.
void set_mpirun_environment(const TrainArgs& args, const SuperviseSettings& s) {
  setenv("OMPI_MCA_orte_allowed_exit_without_sync", "1", 0);  // a shrink's processes leave
  setenv("OMPI_MCA_orte_execute_quiet", "1", 0);              // no banners after the one line
  setenv("PMIX_MCA_gds", "hash", 0);                          // spawns that never hang in PMIx_Init
  int most = s.np;
  for (const auto& [step, config] : parse_schedule(args.schedule)) most = std::max(most, config.world_size());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // With --job a request may grow the job beyond the cores, as the schedule may.
  if (s.hostfile.empty() && s.hosts.empty() && (most > cores || !args.job.empty()))
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  setenv("DT_RUN_SCHEDULE", identity_schedule(args).c_str(), 0);      // restarts keep the run's identity
  setenv(kSupervisorPidEnv, std::to_string(getpid()).c_str(), 1);     // holds --job between attempts, owns the copy
  setenv(kProgressEnv, std::to_string(kProgressVersion).c_str(), 1);  // the records this supervisor reads
}

std::vector<std::string> mpirun_command(const SuperviseSettings& s, int np, const std::string& self) {
  std::vector<std::string> cmd = {s.mpirun};
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.insert(cmd.end(), {"-np", std::to_string(np)});
  // Open MPI passes only its own variables to ranks on other hosts: rank 0 may run on one.
  cmd.insert(cmd.end(), {"-x", kProgressEnv});
  if (!s.hostfile.empty()) cmd.insert(cmd.end(), {"--hostfile", s.hostfile});
  if (!s.hosts.empty()) cmd.insert(cmd.end(), {"--host", s.hosts});
  cmd.insert(cmd.end(), {self, "train"});
  return cmd;
}

// The newest checkpoint of `dir` older than `damaged` (any, when "") that reads back whole,
// made `latest` ("" when none is left).
std::string fall_back(const std::string& dir, const std::string& damaged, const vps::ModelSpec& model) {
  std::vector<std::string> names = ckpt::step_dirs(dir);
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    if (!damaged.empty() && *it >= damaged) continue;  // damaged "": `latest` itself was unreadable
    try {
      ckpt::verify(ckpt::open_step(dir, *it, model));
    } catch (const InputError&) {
      continue;
    }
    ckpt::point_latest(dir, *it);
    return *it;
  }
  return "";
}

// Where a restart continues from, after an attempt failed.
struct From {
  std::optional<ckpt::Checkpoint> ckpt;  // the save directory's latest intact checkpoint
  bool fell_back = false;                // `latest` was damaged and now names an older one
  std::string refused;                   // why no restart can run ("" when one can)
};

From restart_point(const TrainArgs& args, const vps::ModelSpec& model, const nlohmann::json& run) {
  From f;
  const std::string& dir = args.save_dir;
  std::string name;
  try {
    name = ckpt::latest_step_name(dir);
    if (name.empty()) return f;
    f.ckpt = ckpt::open_step(dir, name, model);
    ckpt::verify(*f.ckpt);
  } catch (const InputError& e) {
    const std::string older = fall_back(dir, name, model);
    if (name.empty()) name = "latest";
    if (older.empty()) {
      f.refused = detail::concat("checkpoint '", dir, "/", name, "' is damaged (", e.what(),
                                 ") and no older intact checkpoint is left");
      return f;
    }
    f.ckpt = ckpt::open_step(dir, older, model);
    f.fell_back = true;
    std::printf(
        "supervise: checkpoint '%s/%s' is damaged (%s); falling back to the previous intact checkpoint '%s' (step "
        "%lld)\n",
        dir.c_str(), name.c_str(), e.what(), f.ckpt->step_dir.c_str(), static_cast<long long>(f.ckpt->step));
  }
  const std::string diff = identity_difference(run, f.ckpt->trainer.value("run", nlohmann::json()));
  if (!diff.empty()) f.refused = detail::concat("checkpoint '", f.ckpt->step_dir, "' is another run's: ", diff);
  return f;
}

// ---- the memory copy (job/memory_copy.h) ----

constexpr const char* kCopyDirPrefix = "dynatrain-copy-";

// Copies in `root` whose supervisor is gone (SIGKILLed: nothing ran its clean-up), removed with
// one line. A copy's name holds its supervisor's pid.
void remove_orphaned_copies(const fs::path& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kCopyDirPrefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + std::strlen(kCopyDirPrefix), &end, 10);
    if (*end != '\0' || pid <= 0 || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(entry.path(), rm);
    std::printf("supervise: removed '%s', the memory copy of a job whose supervisor (pid %ld) is gone\n",
                entry.path().c_str(), pid);
  }
}

// The directory the job keeps its memory copy in: made before the first attempt, removed when
// the supervisor returns (on every way out; a SIGKILLed supervisor's by the next supervisor's start).
class MemoryCopyDir {
 public:
  explicit MemoryCopyDir(int redundancy) {
    if (redundancy == 0) return;
    const char* root = std::getenv("DT_MEMORY_COPY_ROOT");
    remove_orphaned_copies(root ? root : "/dev/shm");
    path_ = (fs::path(root ? root : "/dev/shm") / (kCopyDirPrefix + std::to_string(getpid()))).string();
    std::error_code ec;
    fs::remove_all(path_, ec);
    fs::create_directories(path_, ec);
    if (ec) DT_INPUT_ERROR("cannot create the memory copy's directory '", path_, "': ", ec.message());
    setenv(kMemoryCopyDirEnv, path_.c_str(), 1);
  }
  MemoryCopyDir(const MemoryCopyDir&) = delete;
  MemoryCopyDir& operator=(const MemoryCopyDir&) = delete;
  ~MemoryCopyDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The step of DIR's latest checkpoint as its index says (-1: none, or unreadable: restart_point
// then finds out why).
std::int64_t latest_step_of(const std::string& dir) {
  try {
    const std::string name = ckpt::latest_step_name(dir);
    return name.empty() ? -1 : ckpt::read_step_index(dir, name).value("step", std::int64_t{-1});
  } catch (const InputError&) {
    return -1;
  }
}

// The memory copy's latest checkpoint when it reads back whole (a rank file whose node was lost
// is read from its buddy's copy) and is at least as new as --save's; otherwise nothing, with one
// line when the copy exists but is not whole.
std::optional<ckpt::Checkpoint> usable_copy(const std::string& copy_dir, const TrainArgs& args,
                                            const vps::ModelSpec& model) {
  if (copy_dir.empty()) return std::nullopt;
  std::optional<ckpt::Checkpoint> c;
  try {
    const std::string name = ckpt::latest_step_name(copy_dir);
    if (name.empty()) return std::nullopt;
    c = ckpt::open_step(copy_dir, name, model);
    ckpt::verify(*c);
  } catch (const InputError& e) {
    std::printf("supervise: the memory copy cannot be read back whole (%s); restarting from --save's checkpoint\n",
                e.what());
    return std::nullopt;
  }
  if (c->step < latest_step_of(args.save_dir)) return std::nullopt;
  return c;
}

// The next attempt after a failed one: from which step, on how many processes, in which layout.
struct Restart {
  std::int64_t from = 0;  // the step it resumes at (0: the start)
  std::int64_t lost = 0;  // steps the failed attempt trained after that
  // The last step done: rank 0's last record, or the step before the checkpoint's when that is
  // newer (rank 0 prints a step's record after the copy of the boundary behind it, job/train_job.h:
  // a loss between the two leaves the copy one record ahead, and the copy proves the step done).
  std::int64_t last_step = -1;
  int had = 0;  // the processes at the time of the failure
  vps::ParallelConfig layout;
};

Restart next_attempt(const TrainArgs& args, const train::TrainerOptions& o, const From& f, const Attempt& a,
                     const std::string& schedule, int np, int code) {
  Restart r;
  // The processes of rank 0's last step record (a grown job counts its grown processes).
  r.had = a.processes > 0 ? a.processes : np;
  vps::ParallelConfig previous =
      a.layout.empty() ? parse_schedule(schedule).front().second : vps::ParallelConfig::parse(a.layout);
  if (f.ckpt) {
    r.from = f.ckpt->step;
    previous = f.ckpt->config;
    r.last_step = std::max(a.last_step, r.from - 1);
  } else if (!args.resume_dir.empty()) {
    r.from = ckpt::open_latest(args.resume_dir, o.model).step;
  }
  r.last_step = std::max(r.last_step, a.last_step);
  r.lost = std::max<std::int64_t>(0, r.last_step + 1 - r.from);
  // One process fewer after a loss; as many after a damaged checkpoint's refusal (exit 2).
  r.layout = choose_restart_layout(o, previous, std::max(1, code == 2 ? r.had : r.had - 1));
  return r;
}

void print_restart(const Restart& r, int code, int number, int max_restarts, bool from_copy) {
  const std::string when = r.last_step < 0 ? "before its first step" : "after step " + std::to_string(r.last_step);
  std::printf(
      "supervise: the job ended with exit %d %s on %d processes; restart %d of %d from step %lld "
      "(%lld steps lost) on %d processes in %s%s\n",
      code, when.c_str(), r.had, number, max_restarts, static_cast<long long>(r.from), static_cast<long long>(r.lost),
      r.layout.world_size(), r.layout.str().c_str(), from_copy ? ", from the memory copy" : "");
  std::fflush(stdout);
}

// With --job DIR: the loss and the restart in the job's event log (job/job_events.h), written
// between two attempts, when no job holds the log. The rank lost is not known here (-1): the
// job's one line on stderr names it. An attempt refused its checkpoint (exit 2) lost no process.
void record_restart(const std::string& job_dir, const Restart& r, int code, int number, bool from_copy) {
  open_event_log(job_dir);
  if (code != 2)
    record_process_lost(
        -1, -1,
        detail::concat("the job ended with exit ", code, " ",
                       r.last_step < 0 ? "before its first step" : detail::concat("after step ", r.last_step), " on ",
                       r.had, " processes"));
  record_recovery(r.from, r.layout.str(), r.layout.world_size(),
                  detail::concat("restart ", number, " from ", from_copy ? "the memory copy" : "the checkpoint",
                                 r.from == 0 && !from_copy ? " (none: the start)" : "", ", ", r.lost, " steps lost"));
  close_event_log();
}

// The launcher's own checks (before it starts anything) and the trainer options that choose a
// restart layout.
train::TrainerOptions checked_options(const TrainArgs& args, const SuperviseSettings& s) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE"))
    DT_INPUT_ERROR("--np starts mpirun itself: run `dynatrain train --np ", s.np, " ...` without mpirun in front");
  if (std::getenv("RANK") && std::getenv("WORLD_SIZE"))  // one supervisor a process: the training N times over
    DT_INPUT_ERROR("--np starts mpirun itself, but this process is rank ", std::getenv("RANK"), " of ",
                   std::getenv("WORLD_SIZE"), " started by dynatrain launch (or torchrun): run `dynatrain train --np ",
                   s.np, " ...` alone, or drop --np under launch");
  if (s.np < 1) DT_INPUT_ERROR("--np N needs N >= 1, the processes to start");
  if (s.max_restarts > 0 && args.save_dir.empty())
    DT_INPUT_ERROR(
        "--max-restarts needs --save DIR (and --save-every N): a restart resumes from DIR's last checkpoint");
  if (args.redundancy > 0 && s.max_restarts == 0)
    DT_INPUT_ERROR("--redundancy ", args.redundancy, " keeps the state's copy for a restart: add --max-restarts K");
  train::TrainerOptions o;
  o.model = vps::model_from_name(args.model);
  o.global_batch = args.global_batch;
  o.seq = args.seq;
  o.micro_batches = args.micro_batches;
  return o;
}

std::string this_executable() {
  char self[PATH_MAX] = {};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) DT_INPUT_ERROR("cannot find this executable (/proc/self/exe)");
  return self;
}

// The train command line minus what each attempt sets itself (its schedule, resume and CSV).
std::vector<std::string> flags_of_every_attempt(const std::vector<std::string>& argv) {
  std::vector<std::string> base = argv;
  for (const char* flag : {"--schedule", "--resume", "--csv"}) base = without_flag(base, flag, true);
  return without_flag(base, "--static", false);
}

// SIGINT / SIGTERM / SIGHUP to the supervisor go to mpirun (and end the job without a restart).
void forward_signals_to_job() {
  struct sigaction sa = {};
  sa.sa_handler = forward_signal;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

}  // namespace

int supervise(const TrainArgs& args, const SuperviseSettings& s) {
  const train::TrainerOptions o = checked_options(args, s);
  const nlohmann::json run =
      run_identity(args, o.model, args.data.empty() ? train::embedded_text() : train::read_text_file(args.data));
  if (const std::string why = save_dir_problem(args, run, o.model); !why.empty()) throw InputError(why);
  const std::string self = this_executable();
  set_mpirun_environment(args, s);
  become_subreaper();
  const MemoryCopyDir copy_dir(args.redundancy);
  const std::vector<std::string> base = flags_of_every_attempt(s.argv);
  forward_signals_to_job();

  std::string schedule = args.static_layout ? "0:" + parse_schedule(args.schedule).front().second.str() : args.schedule;
  std::string resume = args.resume_dir;
  int np = s.np;
  std::vector<CsvPart> parts;
  int code = 0;
  std::string ended_why;               // why no further attempt (for the requests left in --job DIR)
  std::optional<SupervisorHold> hold;  // --job DIR between a failed attempt and the next one's leader
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> cmd = mpirun_command(s, np, self);  // its flags, then the train command's
    cmd.insert(cmd.end(), base.begin(), base.end());
    cmd.insert(cmd.end(), {"--schedule", schedule});
    if (!resume.empty()) cmd.insert(cmd.end(), {"--resume", resume});
    if (!args.csv.empty()) {
      if (parts.empty()) parts.push_back({});
      parts.back().path = args.csv + ".attempt-" + std::to_string(attempt);
      cmd.insert(cmd.end(), {"--csv", parts.back().path});
    }
    const Attempt a = run_job(cmd);
    hold.reset();
    code = a.exit_code;
    say_start_up_signal(a, args.notice.signal);
    ended_why = detail::concat("the job ended with exit ", code);
    if (code == 0 || g_signal || s.max_restarts == 0) break;  // done, stopped, or no restarts asked for
    if (a.every_process_noticed) {                            // a scheduler took the whole job back: it ends, saved
      std::printf("supervise: every process had notice; the job ends without a restart\n");
      code = code == 1 ? 128 + args.notice.signal : code;  // mpirun's 1 after the workers' 128 + signal
      break;
    }
    // From the memory copy, or the last intact checkpoint of this run, or the start.
    From f;
    f.ckpt = usable_copy(copy_dir.path(), args, o.model);
    const bool from_copy = f.ckpt.has_value();
    if (!from_copy && !args.save_dir.empty()) f = restart_point(args, o.model, run);
    if (!f.refused.empty()) {
      std::printf("supervise: the job ended with exit %d; no restart: %s\n", code, f.refused.c_str());
      ended_why += "; no restart: " + f.refused;
      code = 2;
      break;
    }
    if (code == 2 && !f.fell_back) break;  // bad input: the same again
    if (attempt == s.max_restarts) {
      std::printf("supervise: the job ended with exit %d; no restarts left (--max-restarts %d)\n", code,
                  s.max_restarts);
      ended_why += detail::concat("; no restarts left (--max-restarts ", s.max_restarts, ")");
      break;
    }
    const Restart r = next_attempt(args, o, f, a, schedule, np, code);
    if (r.from >= args.steps) {  // the final checkpoint was written: the training is complete
      std::printf("supervise: the job ended with exit %d after its final checkpoint (step %lld); done\n", code,
                  static_cast<long long>(r.from));
      code = 0;
      break;
    }
    if (f.ckpt) resume = from_copy ? copy_dir.path() : args.save_dir;
    np = r.layout.world_size();
    schedule = "0:" + r.layout.str();
    print_restart(r, code, attempt + 1, s.max_restarts, from_copy);
    if (!args.job.empty()) record_restart(args.job, r, code, attempt + 1, from_copy);
    hold.emplace(args.job);
    if (!parts.empty()) {
      parts.back().keep_below = r.from;
      parts.push_back({"", INT64_MAX, attempt + 1, r.lost});
    }
  }
  if (!parts.empty()) assemble_csv(args.csv, parts);
  if (code != 0) end_supervised_job_dir(args.job, code, ended_why);
  return code;
}

}  // namespace dynatrain::job
