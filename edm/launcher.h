// How the elastic device manager starts and ends processes. One interface, one backend a
// transport: mpi_launcher.h (MPI dynamic processes), store_launcher.h (a world from the
// environment, over c10d: processes leave, none start). Transports without one (in-process
// ranks) cannot grow; shrinking needs no launcher (the world is split and the leavers stop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/transport.h"
#include "common/error.h"

namespace dynatrain::edm {

// The processes of a grow could not be started (e.g. MPI_Comm_spawn failed: a host outside
// the job's allocation). Thrown by every rank of the grow alike; what() is the one line the
// refused switch reports ("cannot start N process(es): ...").
class LaunchRefused : public CommError {
 public:
  using CommError::CommError;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // Why `count` more processes cannot be started now, beside the `alive` processes of the
  // world (one line for the user), or "" if they can. Local, no communication; the device
  // manager asks world rank 0 and broadcasts.
  virtual std::string cannot_start(int count, int alive) const = 0;
  // Collective over `world`: starts `count` processes running this program with this
  // program's arguments and returns a world of world.size() + count ranks: the old ranks
  // first, in their order, the new ones after. Throws LaunchRefused on every rank alike when
  // the processes could not be started (`world` stays usable; nothing was started), CommError
  // if MPI fails otherwise.
  virtual std::unique_ptr<comm::Transport> grow(comm::Transport& world, int count) = 0;

  // In a process that grow() started: the world it was started into (the same transport its
  // starters got back), once; nullptr in a process started any other way.
  virtual std::unique_ptr<comm::Transport> join() = 0;

  // Whether leave() can end this process while the job goes on; if not, why (one line).
  virtual std::string cannot_leave() const = 0;
  // Whether process `process` (a rank of the current world) may be vacated: leave while the job
  // goes on; if not, why (one line). Asked on world rank 0 for each process a switch vacates.
  virtual std::string cannot_vacate(int process) const {
    (void)process;
    return cannot_leave();
  }
  // Ends this process at once with exit status 0, without waiting for the rest of the job
  // (MPI), or returns (in-process ranks: the rank's thread then returns). Call it after the
  // trainer and its transports are destroyed.
  virtual void leave() = 0;

  // Whether a grow of this job failed in the MPI library itself (not refused beforehand).
  // Open MPI 4.1's mpirun then never exits on its own, even after every process has ended, so
  // the job has to end through end_after_failed_start().
  virtual bool start_failed() const { return false; }
  // After the job's last step, in every process, when start_failed(): the leader waits for the
  // others to end, says why, and ends the job (mpirun exits non-zero); the others leave().
  virtual void end_after_failed_start(bool /*leader*/) {}

  // The job this process belongs to (processes started together share one; every grow starts
  // a new one). Processes of one Open MPI job talk over shared memory, of different jobs over
  // TCP loopback (docs/edm.md); reports name the path with it.
  virtual std::uint64_t job_id() const { return 0; }
};

// In-process ranks (comm/inproc, unit tests): nothing can be started; a rank leaves by
// returning from its thread.
class InprocLauncher final : public Launcher {
 public:
  std::string cannot_start(int count, int /*alive*/) const override {
    return "cannot start " + std::to_string(count) + " process(es): in-process ranks are a fixed set of threads";
  }
  std::unique_ptr<comm::Transport> grow(comm::Transport&, int) override { return nullptr; }
  std::unique_ptr<comm::Transport> join() override { return nullptr; }
  std::string cannot_leave() const override { return {}; }
  void leave() override {}
};

}  // namespace dynatrain::edm
