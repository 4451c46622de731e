#include "edm/mpi_launcher.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"

namespace dynatrain::edm {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw CommError(std::string(what) + ": " + std::string(msg, len));
}

// This process's arguments after argv[0], as the kernel recorded them.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::size_t start = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  if (!args.empty()) args.erase(args.begin());
  return args;
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

class MpiLauncher final : public Launcher {
 public:
  explicit MpiLauncher(MpiLaunchSettings s) : s_(std::move(s)) {}

  std::string executable() const { return s_.executable.empty() ? self_executable() : s_.executable; }

  std::string cannot_start(int count) const override {
    const std::string exe = executable();
    if (exe.empty() || access(exe.c_str(), X_OK) != 0)
      return "cannot start " + std::to_string(count) + " process(es): executable '" + exe +
             "' is missing or not executable";
    if (!s_.hostfile.empty() && access(s_.hostfile.c_str(), R_OK) != 0)
      return "cannot start " + std::to_string(count) + " process(es): hostfile '" + s_.hostfile +
             "' cannot be read";
    return {};
  }

  std::unique_ptr<comm::Transport> grow(comm::Transport& world, int count) override {
    auto* mpi = dynamic_cast<comm::MpiTransport*>(&world);
    DT_CHECK(mpi != nullptr, "MPI launcher needs an MPI transport, got ", world.backend());
    const std::string exe = executable();
    std::vector<std::string> args = own_arguments();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    MPI_Info info = MPI_INFO_NULL;
    if (!s_.hostfile.empty() || !s_.hosts.empty()) {
      MPI_Info_create(&info);
      if (!s_.hostfile.empty()) MPI_Info_set(info, "hostfile", s_.hostfile.c_str());
      if (!s_.hosts.empty()) MPI_Info_set(info, "host", s_.hosts.c_str());
    }
    MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    std::vector<int> errcodes(static_cast<std::size_t>(count), MPI_SUCCESS);
    const int rc = MPI_Comm_spawn(exe.c_str(), argv.data(), count, info, 0, mpi->comm(), &inter, errcodes.data());
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    check_mpi(rc, "MPI_Comm_spawn");
    check_mpi(MPI_Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge (starters)");
    MPI_Comm_disconnect(&inter);
    auto out = comm::MpiTransport::from_comm(merged);
    MPI_Comm_free(&merged);
    return out;
  }

  std::unique_ptr<comm::Transport> join() override {
    MPI_Comm parent = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) return nullptr;
    check_mpi(MPI_Intercomm_merge(parent, 1, &merged), "MPI_Intercomm_merge (joiner)");
    MPI_Comm_disconnect(&parent);
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
  MpiLaunchSettings s_;
};

}  // namespace

std::unique_ptr<Launcher> make_mpi_launcher(MpiLaunchSettings settings) {
  return std::make_unique<MpiLauncher>(std::move(settings));
}

}  // namespace dynatrain::edm
