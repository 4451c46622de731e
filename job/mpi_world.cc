#include "job/mpi_world.h"

#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "job/proc_stat.h"

namespace dynatrain::job {

namespace {

// Everything the signal handler reads, prepared before it is installed (no allocation there).
struct JobInfo {
  int rank = 0, size = 1;
  char marker[512] = {};  // "<session dir>/dynatrain-reported"; empty: no claim needed
  char host[256] = {};    // this node's host name, which the peers watched share
  static constexpr int kMaxPeers = 4096;
  int peer_pid[kMaxPeers] = {};  // pid of each rank on this node, 0 elsewhere
};
JobInfo g_job;
EnvWorldFactory g_env_world = nullptr;

bool started_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_RANK") != nullptr; }

// Grace before a rank other than 0 reports: rank 0, failing alike, reports first.
constexpr auto kNonRootGrace = std::chrono::milliseconds(1000);
// Before MPI starts, every rank finds a flag error alike and rank 0 prints it: the others wait
// for mpirun to end them once rank 0 has exited. Longer than kNonRootGrace, since on a loaded
// machine rank 0 may take seconds to start (load libtorch) after the others gave up.
constexpr auto kPreMpiGrace = std::chrono::milliseconds(15000);

// Async-signal-safe: true when this rank may print the job's one line.
bool claim_report() {
  if (g_job.marker[0] == '\0') return true;
  const int fd = open(g_job.marker, O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd >= 0) {
    close(fd);
    return true;
  }
  return errno != EEXIST;
}

// Async-signal-safe integer append.
char* append_int(char* p, const char* end, long v) {
  char digits[24];
  int n = 0;
  if (v < 0) {
    if (p < end) *p++ = '-';
    v = -v;
  }
  do digits[n++] = static_cast<char>('0' + v % 10);
  while ((v /= 10) > 0 && n < 23);
  while (n > 0 && p < end) *p++ = digits[--n];
  return p;
}

char* append_str(char* p, const char* end, const char* s) {
  while (*s && p < end) *p++ = *s++;
  return p;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace

bool process_gone(long pid) {
  ProcStat stat;
  return !read_proc_stat(pid, stat) || stat.ended();
}

void stop_on_signal(int sig) {
  // Peers are looked up before the claim: until some rank claims, no handler has exited, so the
  // ranks found gone are those that ended first (the cause), not survivors already stopping.
  int gone[16], n_gone = 0;
  for (int r = 0; r < g_job.size && r < JobInfo::kMaxPeers && n_gone < 16; ++r)
    if (r != g_job.rank && g_job.peer_pid[r] != 0 && process_gone(g_job.peer_pid[r])) gone[n_gone++] = r;
  if (claim_report()) {
    char line[1024], *p = line, *end = line + sizeof line - 2;
    p = append_str(p, end, "dynatrain: error: rank ");
    p = append_int(p, end, g_job.rank);
    p = append_str(p, end, " of ");
    p = append_int(p, end, g_job.size);
    p = append_str(p, end, ": stopped by ");
    p = append_str(p, end, signal_name(sig));
    for (int i = 0; i < n_gone; ++i) {
      p = append_str(p, end, i ? ", " : " after rank ");
      p = append_int(p, end, gone[i]);
      p = append_str(p, end, " (pid ");
      p = append_int(p, end, g_job.peer_pid[gone[i]]);
      p = append_str(p, end, ")");
    }
    if (n_gone) p = append_str(append_str(p, end, " ended without a word (killed?) on node "), end, g_job.host);
    *p++ = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, static_cast<std::size_t>(p - line));
    (void)ignored;
  }
  _exit(128 + sig);
}

bool peer_gone_on_this_node() {
  for (int r = 0; r < g_job.size && r < JobInfo::kMaxPeers; ++r)
    if (r != g_job.rank && g_job.peer_pid[r] != 0 && process_gone(g_job.peer_pid[r])) return true;
  return false;
}

namespace {

// The failure path's view of `world` from this rank (collective: one all-gather of pids and
// host ids).
void gather_job_info(comm::Transport& world, JobInfo& info) {
  info.rank = world.rank();
  info.size = world.size();
  // One marker per mpirun (the job family): processes that a grow started belong to other jobs
  // of the same family, and the job's one line is one line across all of them.
  if (const char* dir = std::getenv("OMPI_MCA_orte_jobfam_session_dir");
      dir && std::strlen(dir) + 32 < sizeof info.marker)
    std::snprintf(info.marker, sizeof info.marker, "%s/dynatrain-reported", dir);
  struct Id {
    std::int64_t pid;
    std::int64_t host;
  };
  gethostname(info.host, sizeof info.host - 1);
  const std::int64_t host = this_host_id();
  const auto ids = comm::all_gather_values(world, Id{getpid(), host});
  for (int r = 0; r < world.size() && r < JobInfo::kMaxPeers; ++r)
    info.peer_pid[r] = ids[r].host == host ? static_cast<int>(ids[r].pid) : 0;
}

// A signal whose handler another part of the job installed (a preemption notice's,
// job/notice.h) keeps it: only default, ignored or our own handlers are (re)placed.
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = stop_on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    const bool taken_over = !(current.sa_flags & SA_SIGINFO) && current.sa_handler != SIG_DFL &&
                            current.sa_handler != SIG_IGN && current.sa_handler != stop_on_signal;
    if (!taken_over) sigaction(sig, &sa, nullptr);
  }
}

// Fills g_job for this rank of `world` (collective) and installs the stop handlers.
void prepare_failure_path(comm::Transport& world) {
  gather_job_info(world, g_job);
  install_stop_handlers();
}

// "rank 1 (pid 4242)" for a peer of this node, "a peer (pid 4242)" otherwise.
std::string lost_peer_name(int pid) {
  for (int r = 0; r < g_job.size && r < JobInfo::kMaxPeers; ++r)
    if (r != g_job.rank && g_job.peer_pid[r] == pid) return detail::concat("rank ", r, " (pid ", pid, ")");
  return detail::concat("a peer (pid ", pid, ")");
}

}  // namespace

std::int64_t this_host_id() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return static_cast<std::int64_t>(std::hash<std::string>{}(name));
}

bool is_nonzero_mpi_rank() {
  if (environment_names_world()) {  // a RANK that names no rank of WORLD_SIZE is not one: it says why at once
    char *end_rank = nullptr, *end_size = nullptr;
    const long rank = std::strtol(std::getenv("RANK"), &end_rank, 10);
    const long size = std::strtol(std::getenv("WORLD_SIZE"), &end_size, 10);
    return *std::getenv("RANK") && *end_rank == '\0' && *end_size == '\0' && rank >= 1 && rank < size;
  }
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return rank && std::strcmp(rank, "0") != 0;
}

bool environment_names_world() { return !started_by_mpirun() && std::getenv("RANK") && std::getenv("WORLD_SIZE"); }

void set_env_world_factory(EnvWorldFactory factory) { g_env_world = factory; }

void note_mpirun_environment(const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule, bool requests) {
  if (!started_by_mpirun()) return;
  bool shrinks = requests, grows = requests;
  for (std::size_t i = 1; i < schedule.size(); ++i) {
    shrinks |= schedule[i].second.world_size() < schedule[i - 1].second.world_size();
    grows |= schedule[i].second.world_size() > schedule[i - 1].second.world_size();
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  MPI_Comm parent = MPI_COMM_NULL;
  if (initialized) MPI_Comm_get_parent(&parent);
  if (parent != MPI_COMM_NULL) return;  // started by a grow: the job's rank 0 said it already
  auto lacks = [](const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v == nullptr || std::strcmp(v, value) != 0;
  };
  std::string missing;
  if (shrinks && lacks("OMPI_MCA_orte_allowed_exit_without_sync", "1"))
    missing += "OMPI_MCA_orte_allowed_exit_without_sync=1 (processes leaving a shrink; without it they stay, idle)";
  if (grows && lacks("PMIX_MCA_gds", "hash"))
    missing += std::string(missing.empty() ? "" : " and ") +
               "PMIX_MCA_gds=hash (processes a grow starts; without it a spawn can hang)";
  if (missing.empty()) return;
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  std::printf(
      "note: this mpirun's environment lacks %s; start the job as `dynatrain train --np %s ...` "
      "(without mpirun), which sets it\n",
      missing.c_str(), n ? n : "N");
  std::fflush(stdout);
}

void note_world_after_switch(comm::Transport& world) {
  // A world from the environment keeps its own path; its lines name this world's ranks.
  if (std::string(world.backend()) != "mpi") {
    g_job.rank = world.rank();
    g_job.size = world.size();
    return;
  }
  static JobInfo next;  // gathered aside (a collective), then copied in with the stop signals blocked
  gather_job_info(world, next);
  sigset_t stop, old;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  g_job = next;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  install_stop_handlers();  // a world of one process never had them
}

void wait_for_root_report() {
  if (is_nonzero_mpi_rank()) std::this_thread::sleep_for(kPreMpiGrace);
}

void abort_job(const char* kind, const std::string& message, int exit_code) {
  if (claim_report()) {
    std::fprintf(stderr, "dynatrain: %s: rank %d of %d: %s\n", kind, g_job.rank, g_job.size, message.c_str());
    std::fflush(stderr);
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  _exit(exit_code);  // without MPI (in-process ranks), or should MPI_Abort ever return
}

namespace {

// The failure path of a world from the environment: one line per failing rank (rank 0 first),
// then _exit, so no destructor waits on peers that may be gone. SIGPIPE is ignored: Gloo writes
// to its peers' sockets, and a write to a peer that is gone (a lost process, a survivor that
// shut an abandoned group's connections) must fail as an error the recovery handles, not kill
// this process.
int run_on_env_world(comm::Transport& world, const std::function<int(comm::Transport&)>& body) {
  signal(SIGPIPE, SIG_IGN);
  g_job.rank = world.rank();
  g_job.size = world.size();
  auto fail = [&](const char* kind, const std::string& message, int code) {
    if (world.rank() != 0) std::this_thread::sleep_for(kNonRootGrace);
    std::fprintf(stderr, "dynatrain: %s: rank %d of %d: %s\n", kind, world.rank(), world.size(), message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(code);
  };
  try {
    return body(world);
  } catch (const InputError& e) {
    fail("error", e.what(), 2);
  } catch (const std::bad_alloc&) {
    fail("error", "out of memory (std::bad_alloc); lower the model size or --mem-budget", 3);
  } catch (const std::exception& e) {
    fail("internal error", e.what(), 3);
  }
  return 3;  // not reached
}

}  // namespace

int run_on_mpi_world(const std::function<int(comm::Transport&)>& body) {
  if (g_env_world && environment_names_world())
    if (auto world = g_env_world()) {
      const int code = run_on_env_world(*world, body);
      std::fflush(stdout);
      return code;
    }
  // The ranks' own Open MPI help messages ("MPI_ABORT was invoked ...") would follow our line.
  setenv("OMPI_MCA_orte_execute_quiet", "1", 0);
  comm::MpiSession session;
  auto world = comm::MpiTransport::world();
  if (world->size() == 1) return body(*world);  // tools/main.cc prints and exits
  prepare_failure_path(*world);
  auto fail = [&](const char* kind, const std::string& message, int code) {
    if (world->rank() != 0) std::this_thread::sleep_for(kNonRootGrace);
    abort_job(kind, message, code);
  };
  try {
    return body(*world);
  } catch (const InputError& e) {
    fail("error", e.what(), 2);
  } catch (const PeerLostError& e) {  // found by this rank before mpirun's SIGTERM came
    fail("error",
         detail::concat("stopped after ", lost_peer_name(e.pid()), " ended without a word (killed?); ", e.what()), 3);
  } catch (const std::bad_alloc&) {
    fail("error", "out of memory (std::bad_alloc); lower the model size, the ranks per node or --mem-budget", 3);
  } catch (const std::exception& e) {
    fail("internal error", e.what(), 3);
  }
  return 3;  // not reached: fail() aborts the job
}

}  // namespace dynatrain::job
