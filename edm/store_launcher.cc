#include "edm/store_launcher.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace dynatrain::edm {

namespace {

class StoreLauncher final : public Launcher {
 public:
  std::string cannot_start(int count, int /*alive*/) const override {
    return "cannot start " + std::to_string(count) +
           " process(es): a job started from the environment (torch.distributed: `dynatrain launch`, torchrun) "
           "starts none; start it with `dynatrain train --np N` (MPI) to let it grow";
  }
  std::unique_ptr<comm::Transport> grow(comm::Transport&, int count) override {
    throw LaunchRefused(cannot_start(count, 0));
  }
  std::unique_ptr<comm::Transport> join() override { return nullptr; }
  std::string cannot_leave() const override { return {}; }
  std::string cannot_vacate(int process) const override {
    if (process != 0) return {};
    return "world rank 0 hosts the torch.distributed store (MASTER_ADDR:MASTER_PORT) that every group of the "
           "job is built over, so it cannot leave while the job goes on";
  }
  // Nothing waits for a process that left (no MPI_Finalize); ending at once keeps the groups'
  // destructors from touching peers that already went.
  void leave() override {
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }
};

}  // namespace

std::unique_ptr<Launcher> make_store_launcher() { return std::make_unique<StoreLauncher>(); }

}  // namespace dynatrain::edm
