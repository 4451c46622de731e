#include "edm/mpi_launcher.h"

#include <mpi.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "edm/own_command.h"

namespace dynatrain::edm {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(std::string(what) + ": " + std::string(msg, len));
}

// The host names of an Open MPI host list ("h1,h2:4" -> h1, h2).
std::vector<std::string> host_names(const std::string& list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    const std::string name = item.substr(0, item.find(':'));
    if (!name.empty()) out.push_back(name);
    at = comma + 1;
  }
  return out;
}

bool resolves(const std::string& host) {
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, nullptr, &found);
  if (found != nullptr) freeaddrinfo(found);
  return rc == 0;
}

// Open MPI's slots for the job (MPI_UNIVERSE_SIZE); 0 if it does not say.
int universe_size() {
  int* value = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &value, &flag);
  return flag != 0 && value != nullptr ? *value : 0;
}

// How every refusal of a grow of `count` processes starts (the switch's one line).
std::string refusal_head(int count) { return "cannot start " + std::to_string(count) + " process(es): "; }

// mpirun --oversubscribe (or the MCA parameter) reaches every process as this variable.
bool oversubscribing() {
  const char* v = std::getenv("OMPI_MCA_rmaps_base_oversubscribe");
  return v != nullptr && (std::string(v) == "1" || std::string(v) == "true");
}

class MpiLauncher final : public Launcher {
 public:
  explicit MpiLauncher(MpiLaunchSettings s) : s_(std::move(s)) {}

  std::string executable() const { return s_.executable.empty() ? self_executable() : s_.executable; }

  std::string cannot_start(int count, int alive) const override {
    const std::string head = refusal_head(count);
    const std::string exe = executable();
    if (exe.empty() || access(exe.c_str(), X_OK) != 0)
      return head + "executable '" + exe + "' is missing or not executable";
    // Open MPI's launcher ends the whole job on a host it cannot resolve (ssh fails).
    for (const std::string& h : host_names(s_.hosts))
      if (!resolves(h)) return head + "host '" + h + "' of --host does not resolve";
    std::vector<std::string> listed;
    if (!s_.hostfile.empty()) {
      std::ifstream in(s_.hostfile);
      if (!in) return head + "hostfile '" + s_.hostfile + "' cannot be read";
      for (std::string line; std::getline(in, line);) {
        const auto from = line.find_first_not_of(" \t");
        if (from == std::string::npos || line[from] == '#') continue;
        listed.push_back(line.substr(from, line.find_first_of(" \t", from) - from));
      }
      if (listed.empty()) return head + "hostfile '" + s_.hostfile + "' names no host";
    }
    for (const std::string& h : listed)
      if (!resolves(h)) return head + "host '" + h + "' of hostfile '" + s_.hostfile + "' does not resolve";
    // Without new hosts and without oversubscription, Open MPI starts no more processes than
    // the job's slots (MPI_UNIVERSE_SIZE) and fails the spawn.
    const int universe = universe_size();
    if (s_.hosts.empty() && s_.hostfile.empty() && !oversubscribing() && universe > 0 && alive + count > universe)
      return head + "the job's hosts have " + std::to_string(universe) + " slots and " + std::to_string(alive) +
             " are in use (MPI_UNIVERSE_SIZE); give hosts for new processes (--host, --hostfile) or run mpirun "
             "with --oversubscribe";
    return {};
  }

  // The new job is started by world rank 0 alone (MPI_Comm_spawn over a duplicate of
  // MPI_COMM_SELF) and then connected to the whole old world through a port that rank 0 opens
  // and sends to the new processes (MPI_Comm_accept / MPI_Comm_connect, then a merge): in
  // Open MPI 4.1 a collective spawn that fails at its root (MPI_ERR_SPAWN, e.g. a host outside
  // the job's allocation) never returns on the other ranks. Here they wait in a broadcast of
  // the outcome and refuse the switch together.
  std::unique_ptr<comm::Transport> grow(comm::Transport& world, int count) override {
    auto* mpi = dynamic_cast<comm::MpiTransport*>(&world);
    DT_CHECK(mpi != nullptr, "MPI launcher needs an MPI transport, got ", world.backend());
    MPI_Comm spawned = MPI_COMM_NULL;  // on rank 0: rank 0 <-> the new processes
    char port[MPI_MAX_PORT_NAME] = {};
    int rc = MPI_SUCCESS;
    if (world.rank() == 0) rc = spawn_from_rank0(count, spawned, port);
    check_mpi(MPI_Bcast(&rc, 1, MPI_INT, 0, mpi->comm()), "MPI_Bcast (spawn outcome)");
    if (rc != MPI_SUCCESS) {
      start_failed_ = true;
      throw LaunchRefused(spawn_failure(rc, count));
    }
    MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    check_mpi(MPI_Comm_accept(port, MPI_INFO_NULL, 0, mpi->comm(), &inter), "MPI_Comm_accept (starters)");
    check_mpi(MPI_Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge (starters)");
    MPI_Comm_disconnect(&inter);
    if (world.rank() == 0) {
      MPI_Close_port(port);
      MPI_Comm_free(&spawned);
    }
    auto out = comm::MpiTransport::from_comm(merged);
    MPI_Comm_free(&merged);
    return out;
  }

  std::unique_ptr<comm::Transport> join() override {
    MPI_Comm parent = MPI_COMM_NULL, inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) return nullptr;
    char port[MPI_MAX_PORT_NAME] = {};
    check_mpi(MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, kPortTag, parent, MPI_STATUS_IGNORE),
              "MPI_Recv (port from the starter)");
    check_mpi(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter), "MPI_Comm_connect (joiner)");
    check_mpi(MPI_Intercomm_merge(inter, 1, &merged), "MPI_Intercomm_merge (joiner)");
    MPI_Comm_disconnect(&inter);
    MPI_Comm_free(&parent);
    auto out = comm::MpiTransport::from_comm(merged);
    MPI_Comm_free(&merged);
    return out;
  }

  std::string cannot_leave() const override {
    const char* v = std::getenv("OMPI_MCA_orte_allowed_exit_without_sync");
    if (v != nullptr && std::string(v) == "1") return {};
    return "a process can leave a running Open MPI job only when mpirun runs with "
           "OMPI_MCA_orte_allowed_exit_without_sync=1 (scripts/mpi-env.sh sets it)";
  }

  bool start_failed() const override { return start_failed_; }

  void end_after_failed_start(bool leader) override {
    if (!leader) leave();
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the others leave() meanwhile
    std::printf(
        "note: every step is done; ending the job with MPI_Abort, since after a failed "
        "MPI_Comm_spawn Open MPI 4.1's mpirun does not exit by itself (its exit status is then 1)\n");
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 0);
    _exit(0);  // should MPI_Abort ever return
  }

  std::uint64_t job_id() const override {
    const char* v = std::getenv("OMPI_MCA_ess_base_jobid");  // set by Open MPI in every process
    return v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
  }

  void leave() override {
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }

 private:
  static constexpr int kPortTag = 7411;  // rank 0 -> new processes: the port to connect to

  // On world rank 0: starts `count` processes as one new job (`spawned`: this process <-> them),
  // opens `port` and sends it to each of them. Returns MPI's error code; errors return, they do
  // not abort (the spawn runs on a duplicate of MPI_COMM_SELF with MPI_ERRORS_RETURN).
  int spawn_from_rank0(int count, MPI_Comm& spawned, char* port) const {
    const std::string exe = executable();
    std::vector<std::string> args = own_arguments();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    MPI_Info info = MPI_INFO_NULL;
    if (!s_.hostfile.empty() || !s_.hosts.empty()) {
      MPI_Info_create(&info);
      // add-*: the hosts join the job's allocation (mpirun need not have been given them);
      // host / hostfile: the new processes are mapped onto them.
      if (!s_.hostfile.empty()) {
        MPI_Info_set(info, "add-hostfile", s_.hostfile.c_str());
        MPI_Info_set(info, "hostfile", s_.hostfile.c_str());
      }
      if (!s_.hosts.empty()) {
        MPI_Info_set(info, "add-host", s_.hosts.c_str());
        MPI_Info_set(info, "host", s_.hosts.c_str());
      }
    }
    MPI_Comm self = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(MPI_COMM_SELF, &self), "MPI_Comm_dup (self)");
    MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN);
    std::vector<int> errcodes(static_cast<std::size_t>(count), MPI_SUCCESS);
    int rc = MPI_Comm_spawn(exe.c_str(), argv.data(), count, info, 0, self, &spawned, errcodes.data());
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    MPI_Comm_free(&self);
    if (rc != MPI_SUCCESS) return rc;
    check_mpi(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
    for (int i = 0; i < count; ++i)
      check_mpi(MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, i, kPortTag, spawned), "MPI_Send (port to a new process)");
    return MPI_SUCCESS;
  }

  // The refused switch's line for a spawn that failed with `rc`.
  std::string spawn_failure(int rc, int count) const {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    std::string where;
    if (!s_.hosts.empty()) where = "--host '" + s_.hosts + "'";
    if (!s_.hostfile.empty()) where += (where.empty() ? "" : ", ") + std::string("--hostfile '") + s_.hostfile + "'";
    return refusal_head(count) + "MPI_Comm_spawn failed: " + std::string(msg, len) +
           (where.empty() ? "" : " (" + where + ")");
  }

  MpiLaunchSettings s_;
  std::atomic<bool> start_failed_{false};  // set by the prepare thread, read after the last step
};

}  // namespace

std::unique_ptr<Launcher> make_mpi_launcher(MpiLaunchSettings settings) {
  return std::make_unique<MpiLauncher>(std::move(settings));
}

}  // namespace dynatrain::edm
