// `dynatrain launch --np N [--port P] -- CMD ARGS...`: a small torchrun. Starts N processes of CMD
// with the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT; GROUP_RANK = NODE_RANK), lets them share this terminal's output,
// forwards SIGINT / SIGTERM to them (each rank heads a process group of its own, which gets
// them), and exits with the first non-zero exit code (128 + signal
// for a rank killed by one), ending the others; 0 when every rank exited 0. The others are ended
// with SIGKILL (a SIGTERM would be a preemption notice to an adopted Python job, docs/python.md):
// the failed rank's line is the job's. A rank that exits non-zero prints its own (an adopted
// job's `dynatrain: error: rank R: <exception>`); one killed by a signal it did not handle (SIGKILL, the
// OOM killer) says nothing itself, so the launcher prints the line naming it. With --keep-going
// a killed rank's others go on instead (an adopted job on torch.distributed recovers a lost
// process in place): the exit code is then that of the ranks still running, 0 when each of them
// exited 0 (128 + signal of the first when every rank of this launcher was killed: a lost node).
// Each rank gets DYNATRAIN_LAUNCH=keep-going or =end: whether a lost peer is
// recovered in place, or this launcher ends the job (the survivors then wait for it, silent).
// With --keep-going each rank also gets a pipe of its own (DYNATRAIN_LAUNCH_FD), through which
// the launcher tells it the pid of another of its ranks killed (job/sibling_loss.h), as soon as
// that rank's exit begins (job/proc_stat.h), before the kernel has freed its memory.
// With --join HOST:PORT the N processes are a world of their own (their own MASTER_PORT) that
// joins the running adopted job whose store is HOST:PORT (DYNATRAIN_JOIN; python/dynatrain/_join.py).
// With --nnodes M --node-rank R --master-addr HOST one launcher runs on each of M nodes: node R's
// N processes are global ranks R*N .. R*N+N-1 of M*N, meeting at HOST:--master-port (node 0's
// rank 0 hosts the store there).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/port.h"
#include "job/lost_peer.h"
#include "job/notice.h"
#include "job/proc_stat.h"
#include "job/sibling_loss.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"

namespace dynatrain::tools {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop(int sig) { g_stop_signal = sig; }

// What one launcher's processes are: ranks first_rank .. first_rank + np - 1 of world, on node
// node_rank, meeting at addr:port.
struct World {
  int np = 1, world = 1, node_rank = 0, first_rank = 0;
  std::string addr = "127.0.0.1";
  int port = 0;
  bool keep_going = false;
  std::string join;
};

// Child side: the torchrun variables, then exec; never returns.
[[noreturn]] void exec_rank(int local, const World& w, const std::vector<std::string>& command) {
  const auto set = [](const char* name, const std::string& value) { setenv(name, value.c_str(), 1); };
  set("RANK", std::to_string(w.first_rank + local));
  set("LOCAL_RANK", std::to_string(local));
  set("WORLD_SIZE", std::to_string(w.world));
  set("LOCAL_WORLD_SIZE", std::to_string(w.np));
  set("GROUP_RANK", std::to_string(w.node_rank));
  set("NODE_RANK", std::to_string(w.node_rank));
  set("MASTER_ADDR", w.addr);
  set("MASTER_PORT", std::to_string(w.port));
  set("DYNATRAIN_LAUNCH", w.keep_going ? "keep-going" : "end");
  if (!w.join.empty()) set("DYNATRAIN_JOIN", w.join);
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "dynatrain: error: launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// "dynatrain: error: launch: rank 1 (pid 4242) on node h1 ended by SIGKILL (killed?); ..."; a
// notice signal the rank did not handle ended it before its handler was installed (start-up).
// The node is DYNATRAIN_NODE when set (as the Python module names it), else the hostname.
void report_killed_rank(int rank, pid_t pid, int sig, bool keep_going) {
  const std::string host = job::node_name();
  const char* name = sigabbrev_np(sig);
  const bool notice = job::is_notice_signal(sig);
  std::fprintf(stderr, "dynatrain: error: launch: rank %d (pid %d) on node %s ended by %s%s (%s); %s\n", rank,
               static_cast<int>(pid), host.c_str(), name ? "SIG" : "signal ", name ? name : std::to_string(sig).c_str(),
               notice ? "not handled: a notice during start-up, before the process could take notices?" : "killed?",
               keep_going ? "the other ranks go on (--keep-going)" : "ending the other ranks");
  std::fflush(stderr);
}

// --keep-going: tells the others of each rank a signal is ending as soon as its exit begins, not
// when waitpid() sees it (the kernel frees its memory first: about 0.1 s at 2 GB). `told`: by
// rank, set here.
void tell_of_dying_ranks(const std::vector<pid_t>& pids, std::vector<bool>& told, const std::vector<int>& loss_pipes) {
  for (std::size_t r = 0; r < pids.size(); ++r) {
    job::ProcStat stat;
    if (pids[r] > 0 && !told[r] && job::read_proc_stat(pids[r], stat) && stat.killed_by() != 0) {
      job::tell_siblings(loss_pipes, pids[r]);
      told[r] = true;
    }
  }
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Waits for every rank; on a signal to us forwards it (SIGKILL after a grace), on the first
// failure ends the others with SIGKILL. Returns the first non-zero exit code. `keep_going`: a rank killed by a
// signal is reported, its pid written into the others' `loss_pipes` (write ends by rank, empty:
// none), and the others go on (its code counts for nothing, unless every rank was
// killed so: then the first one's). Ranks are reported as first_rank + their index.
int supervise(std::vector<pid_t> pids, bool keep_going = false, int first_rank = 0, std::vector<int> loss_pipes = {}) {
  int first = 0, alive = static_cast<int>(pids.size()), first_killed = 0, killed_count = 0;
  bool ending = false;
  std::vector<bool> told(pids.size(), false);  // the others were told this rank was killed
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
      if (keep_going && !ending && !loss_pipes.empty()) tell_of_dying_ranks(pids, told, loss_pipes);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a killed rank reported within 5 ms
      continue;
    }
    std::size_t index = pids.size();
    for (std::size_t r = 0; r < pids.size(); ++r)
      if (pids[r] == done) index = r;
    if (index == pids.size()) continue;  // not a rank (never: only ranks are our children)
    pids[index] = -1;
    const int rank = first_rank + static_cast<int>(index);
    if (index < loss_pipes.size() && loss_pipes[index] >= 0) close(std::exchange(loss_pipes[index], -1));
    --alive;
    const int code = exit_code_of(status);
    const bool killed = WIFSIGNALED(status);
    if (killed && keep_going && !ending) {
      if (!told[index]) job::tell_siblings(loss_pipes, done);  // first: their step stops at once (job/loss_watch.h)
      report_killed_rank(rank, done, WTERMSIG(status), true);
      if (killed_count++ == 0) first_killed = code;
      continue;
    }
    if (code != 0 && first == 0) first = code;
    if (code != 0 && !ending) {
      if (killed) report_killed_rank(rank, done, WTERMSIG(status), false);
      end_others(SIGKILL);  // not SIGTERM: an adopted job reads that as a notice and goes on
      ending = true;
    }
  }
  return killed_count == static_cast<int>(pids.size()) ? first_killed : first;
}

struct LaunchArgs {
  int np = 1;
  int port = 0;
  bool keep_going = false;
  std::string join;  // HOST:PORT of a running job's store, or empty
  int nnodes = 1, node_rank = 0;
  std::string master_addr;  // empty: 127.0.0.1 (one node only)
  int master_port = -1;     // -1: --port on one node, 29500 (torchrun's default) on several
  bool port_given = false;
  std::vector<std::string> command;
};

// Why `where` is not HOST:PORT ("" if it is).
std::string join_problem(const std::string& where) {
  const auto colon = where.rfind(':');
  if (colon == std::string::npos || colon == 0) return "is not HOST:PORT";
  const std::string port = where.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    return "has no port in 1..65535";
  return "";
}

// The world this launcher's processes are part of, from the node flags (checked here: their
// CLI11 checks bound each alone, not against each other).
World world_of(const LaunchArgs& args) {
  World w;
  w.np = args.np;
  w.keep_going = args.keep_going;
  w.join = args.join;
  if (args.node_rank >= args.nnodes)
    DT_INPUT_ERROR("launch: --node-rank ", args.node_rank, " is out of range for --nnodes ", args.nnodes,
                   "; valid: 0..", args.nnodes - 1);
  if (static_cast<long long>(args.nnodes) * args.np > 131072)
    DT_INPUT_ERROR("launch: --nnodes ", args.nnodes, " x --np ", args.np, " is ",
                   static_cast<long long>(args.nnodes) * args.np, " processes; valid: at most 131072");
  if (!args.master_addr.empty() && args.master_addr.find_first_of(" \t\n") != std::string::npos)
    DT_INPUT_ERROR("launch: --master-addr '", args.master_addr, "' has a space; valid: a host name or address");
  w.world = args.nnodes * args.np;
  w.node_rank = args.node_rank;
  w.first_rank = args.node_rank * args.np;
  if (!args.master_addr.empty()) w.addr = args.master_addr;
  w.port = args.master_port >= 0 ? args.master_port : args.port;
  if (args.nnodes == 1) return w;
  if (args.master_addr.empty())
    DT_INPUT_ERROR("launch: --nnodes ", args.nnodes, " needs --master-addr HOST: the address of node 0 (whose ",
                   "rank 0 hosts the store), reachable from every node");
  if (args.port_given)
    DT_INPUT_ERROR("launch: --port ", args.port, " is for one node; with --nnodes ", args.nnodes,
                   " give --master-port P (1..65535, the same on every node)");
  if (!args.join.empty())
    DT_INPUT_ERROR("launch: --join starts joiners on one node; it does not take --nnodes ", args.nnodes,
                   " (start one `launch --join` on each node)");
  if (args.master_port < 0) w.port = 29500;
  return w;
}

int run_launch(const LaunchArgs& args) {
  // --np, --port, --nnodes, --node-rank, --master-port were checked while parsing (their CLI11 checks).
  if (args.command.empty()) DT_INPUT_ERROR("launch: no command (dynatrain launch --np N -- CMD ARGS...)");
  if (!args.join.empty())
    if (const std::string why = join_problem(args.join); !why.empty())
      DT_INPUT_ERROR("launch: --join '", args.join, "' ", why, "; valid: HOST:PORT of the running job's store (its ",
                     "MASTER_ADDR:MASTER_PORT)");
  World w = world_of(args);
  if (w.node_rank == 0) {  // the store's node: its port must be free (other nodes only connect)
    const int port = probe_port(w.port, args.nnodes > 1);
    if (port < 0)
      DT_INPUT_ERROR("launch: port ", w.port, args.nnodes > 1 ? "" : " on 127.0.0.1", " is not free (",
                     std::strerror(errno), "); pick another ", args.nnodes > 1 ? "--master-port" : "--port",
                     args.nnodes > 1 ? "" : " or 0 for a free one");
    w.port = port;
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  std::vector<int> loss_pipes;  // by rank: the write end of its pipe (--keep-going only)
  for (int local = 0; local < args.np; ++local) {
    std::optional<job::SiblingPipe> pipe;
    if (args.keep_going) pipe = job::SiblingPipe::open();
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // a group of its own: ending a rank ends the processes it started
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (pipe) pipe->pass_to_this_process();
      exec_rank(local, w, args.command);
    }
    if (pipe) loss_pipes.push_back(pipe->keep_write_end());
    if (pid < 0) {
      for (pid_t p : pids) kill(-p, SIGTERM);
      supervise(pids);
      throw CommError(detail::concat("launch: fork of rank ", w.first_rank + local, " failed: ", std::strerror(errno)));
    }
    setpgid(pid, pid);  // also here, so that the group exists before any kill(-pid)
    pids.push_back(pid);
  }
  return supervise(std::move(pids), args.keep_going, w.first_rank, std::move(loss_pipes));
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start N local processes of a command with the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, "
      "LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT): dynatrain commands started so meet over "
      "c10d (Gloo); with --nnodes M, run one launch on each of M nodes");
  auto args = std::make_shared<LaunchArgs>();
  cmd->add_option("--np", args->np, "Processes to start")->required()->check(whole_number_in(1, 131072));
  auto* port = cmd->add_option("--port", args->port, "MASTER_PORT of the rendezvous on 127.0.0.1 (0: a free port)")
                   ->check(whole_number_in(0, 65535, " (0: a free one)"))
                   ->capture_default_str();
  cmd->add_option("--nnodes", args->nnodes, "Nodes of the job, each running one launch with the same flags")
      ->check(whole_number_in(1, 131072))
      ->capture_default_str();
  cmd->add_option("--node-rank", args->node_rank,
                  "This node's index, 0..nnodes-1: its processes are global ranks "
                  "node-rank x np .. node-rank x np + np - 1")
      ->check(whole_number_in(0, 131071))
      ->capture_default_str();
  cmd->add_option("--master-addr", args->master_addr,
                  "Address of node 0, whose rank 0 hosts the store (MASTER_ADDR; needed with --nnodes above 1)");
  cmd->add_option("--master-port", args->master_port,
                  "MASTER_PORT, the same on every node (default 29500 with --nnodes above 1, else --port)")
      ->check(whole_number_in(1, 65535))
      ->excludes(port);
  cmd->add_flag("--keep-going", args->keep_going,
                "A rank killed by a signal is reported and the others go on (an adopted job on torch.distributed "
                "recovers it in place, docs/python.md); the exit code is the others'");
  cmd->add_option("--join", args->join,
                  "HOST:PORT of a running adopted job's store (its MASTER_ADDR:MASTER_PORT): the N processes join "
                  "it at its next grow (DYNATRAIN_JOIN; docs/python.md, \"Changing the process count\")");
  cmd->add_option("command", args->command, "The command and its arguments, after --");
  return [args, port] {
    args->port_given = port->count() > 0;
    return run_launch(*args);
  };
}

}  // namespace dynatrain::tools
