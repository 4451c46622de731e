// `dynatrain launch --np N [--port P] -- CMD ARGS...`: a small torchrun for one machine. Starts N
// processes of CMD with the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT), lets them share this terminal's output,
// forwards SIGINT / SIGTERM to them (each rank heads a process group of its own, which gets
// them), and exits with the first non-zero exit code (128 + signal
// for a rank killed by one), ending the others; 0 when every rank exited 0. The others are ended
// with SIGKILL (a SIGTERM would be a preemption notice to an adopted Python job, docs/python.md):
// the failed rank's line is the job's. A rank that exits non-zero prints its own (an adopted
// job's `dynatrain: rank R: <exception>`); one killed by a signal it did not handle (SIGKILL, the
// OOM killer) says nothing itself, so the launcher prints the line naming it. With --keep-going
// a killed rank's others go on instead (an adopted job on torch.distributed recovers a lost
// process in place): the exit code is then that of the ranks still running, 0 when each of them
// exited 0. Each rank gets DYNATRAIN_LAUNCH=keep-going or =end: whether a lost peer is
// recovered in place, or this launcher ends the job (the survivors then wait for it, silent).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "job/notice.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace dynatrain::tools {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop(int sig) { g_stop_signal = sig; }

// Binds 127.0.0.1:port (0: any free port) and returns the port, or -1 with errno set.
int probe_port(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  int got = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    got = ntohs(addr.sin_port);
  const int saved = errno;
  close(fd);
  errno = saved;
  return got;
}

// Child side: the torchrun variables, then exec; never returns.
[[noreturn]] void exec_rank(int rank, int np, int port, bool keep_going, const std::vector<std::string>& command) {
  const std::string r = std::to_string(rank), n = std::to_string(np), p = std::to_string(port);
  setenv("RANK", r.c_str(), 1);
  setenv("LOCAL_RANK", r.c_str(), 1);
  setenv("WORLD_SIZE", n.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", p.c_str(), 1);
  setenv("DYNATRAIN_LAUNCH", keep_going ? "keep-going" : "end", 1);
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "dynatrain: error: launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// "dynatrain: error: launch: rank 1 (pid 4242) on node h1 ended by SIGKILL (killed?); ..."; a
// notice signal the rank did not handle ended it before its handler was installed (start-up).
void report_killed_rank(int rank, pid_t pid, int sig, bool keep_going) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const char* name = sigabbrev_np(sig);
  const bool notice = job::is_notice_signal(sig);
  std::fprintf(stderr, "dynatrain: error: launch: rank %d (pid %d) on node %s ended by %s%s (%s); %s\n", rank,
               static_cast<int>(pid), host, name ? "SIG" : "signal ", name ? name : std::to_string(sig).c_str(),
               notice ? "not handled: a notice during start-up, before the process could take notices?" : "killed?",
               keep_going ? "the other ranks go on (--keep-going)" : "ending the other ranks");
  std::fflush(stderr);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Waits for every rank; on a signal to us forwards it (SIGKILL after a grace), on the first
// failure ends the others with SIGKILL. Returns the first non-zero exit code. `keep_going`: a rank killed by a
// signal is reported and the others go on (its code counts for nothing).
int supervise(std::vector<pid_t> pids, bool keep_going = false) {
  int first = 0, alive = static_cast<int>(pids.size());
  bool ending = false;
  auto end_others = [&](int sig) {
    for (pid_t pid : pids)
      if (pid > 0) kill(-pid, sig);  // the rank's process group: what it started goes too
  };
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    if (g_stop_signal != 0 && !ending) {
      end_others(g_stop_signal);  // forwarded as is: ranks report the signal themselves
      if (first == 0) first = 128 + g_stop_signal;
      ending = true;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    }
    if (std::chrono::steady_clock::now() > deadline) end_others(SIGKILL);
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int rank = 0;
    for (std::size_t r = 0; r < pids.size(); ++r)
      if (pids[r] == done) {
        pids[r] = -1;
        rank = static_cast<int>(r);
      }
    --alive;
    const int code = exit_code_of(status);
    const bool killed = WIFSIGNALED(status);
    if (killed && keep_going && !ending) {
      report_killed_rank(rank, done, WTERMSIG(status), true);
      continue;
    }
    if (code != 0 && first == 0) first = code;
    if (code != 0 && !ending) {
      if (killed) report_killed_rank(rank, done, WTERMSIG(status), false);
      end_others(SIGKILL);  // not SIGTERM: an adopted job reads that as a notice and goes on
      ending = true;
    }
  }
  return first;
}

struct LaunchArgs {
  int np = 1;
  int port = 0;
  bool keep_going = false;
  std::vector<std::string> command;
};

int run_launch(const LaunchArgs& args) {
  // --np and --port were checked while parsing (their CLI11 checks).
  if (args.command.empty()) DT_INPUT_ERROR("launch: no command (dynatrain launch --np N -- CMD ARGS...)");
  const int port = probe_port(args.port);
  if (port < 0)
    DT_INPUT_ERROR("launch: port ", args.port, " on 127.0.0.1 is not free (", std::strerror(errno),
                   "); pick another --port or 0 for a free one");
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < args.np; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // a group of its own: ending a rank ends the processes it started
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      exec_rank(rank, args.np, port, args.keep_going, args.command);
    }
    if (pid < 0) {
      for (pid_t p : pids) kill(-p, SIGTERM);
      supervise(pids);
      throw CommError(detail::concat("launch: fork of rank ", rank, " failed: ", std::strerror(errno)));
    }
    setpgid(pid, pid);  // also here, so that the group exists before any kill(-pid)
    pids.push_back(pid);
  }
  return supervise(std::move(pids), args.keep_going);
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start N local processes of a command with the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, "
      "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): dynatrain commands started so meet over c10d (Gloo)");
  auto args = std::make_shared<LaunchArgs>();
  cmd->add_option("--np", args->np, "Processes to start")->required()->check(whole_number_in(1, 131072));
  cmd->add_option("--port", args->port, "MASTER_PORT of the rendezvous on 127.0.0.1 (0: a free port)")
      ->check(whole_number_in(0, 65535, " (0: a free one)"))
      ->capture_default_str();
  cmd->add_flag("--keep-going", args->keep_going,
                "A rank killed by a signal is reported and the others go on (an adopted job on torch.distributed "
                "recovers it in place, docs/python.md); the exit code is the others'");
  cmd->add_option("command", args->command, "The command and its arguments, after --");
  return [args] { return run_launch(*args); };
}

}  // namespace dynatrain::tools
