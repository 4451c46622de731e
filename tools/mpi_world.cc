#include "tools/mpi_world.h"

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"

namespace dynatrain::tools {

int run_on_mpi_world(const std::function<int(comm::Transport&)>& body) {
  comm::MpiSession session;
  auto world = comm::MpiTransport::world();
  try {
    return body(*world);
  } catch (const InputError&) {
    if (world->rank() == 0) throw;
    return 2;
  }
}

}  // namespace dynatrain::tools
