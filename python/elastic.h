// Switches of a Python job's Manager that change its processes, over the elastic device manager
// (edm/): no Python and no torch here; elastic_bindings.cc binds it, dynatrain/_elastic.py
// drives it (docs/python.md, "Changing the process count").
//
//   grow    the layout needs more processes than the world: world rank 0 starts the missing
//           ones (MPI_Comm_spawn of the launch settings' executable with this process's own
//           command line, edm/mpi_launcher.h), they merge into the world and receive their state
//           in the same switch. In them, Elastic::join(), the Manager's joining constructor and
//           finish_join() run the rest of that switch in step with the starters.
//   shrink  fewer: the processes beyond the layout hand their state over and leave (`left`).
//   vacate  named world ranks take no rank (plan::place_around) and leave; processes are
//           started for the ranks the others cannot hold.
//   in place  a shrink or vacate on a world that cannot start processes (torch.distributed's):
//           switch_in_place over that world, no EDM; the caller builds the survivors' world.
// One switch = the EDM's prepare (waited for at once, or started ahead while the caller
// trains), the carry of the caller's blobs, this process's plan with the EDM's placement, the
// engine over the transition world, the EDM's adopt; the manager then works on the new world.
//
// Invariants:
//  * Collective over the manager's world, every rank with equal arguments. Every refusal (a bad
//    vacate list or config, processes that may not leave, processes that cannot be started) is
//    an InputError on every rank alike, thrown before any state moves; the world, the layout
//    and the state are then unchanged.
//  * The transition world keeps every current process's rank (a grow appends), so the source
//    side of the plan is the identity and the destination side the EDM's placement; after the
//    switch, rank r of the new world holds rank r of the layout (Manager's invariant).
//  * Every process-count change needs Open MPI's orte_allowed_exit_without_sync=1
//    (edm::Launcher::cannot_leave), refused without it: processes that leave end without
//    MPI_Finalize (it would wait for the rest of their job), and after a grow so must every
//    process (measured: MPI_Finalize of two connected jobs never returned).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "edm/device_manager.h"
#include "edm/mpi_launcher.h"
#include "edm/vacate.h"
#include "plan/placement.h"
#include "python/manager.h"

namespace dynatrain::python {

// The job's process-count machinery: the MPI launcher and the device manager over the world.
class Elastic {
 public:
  // Over `world` (the manager's first world, which must outlive this). Collective over it.
  Elastic(comm::Transport& world, edm::MpiLaunchSettings launch);
  // In a process a grow started, once: the job's world, received from the starters (collective
  // with their grow). nullptr in a process not started by a grow, and after the first call.
  static std::shared_ptr<Elastic> join(edm::MpiLaunchSettings launch);

  edm::DeviceManager& edm() { return *edm_; }
  const edm::Launcher& launcher() const { return *launcher_; }
  // In a joined process: the layout the job runs now and rank 0's payload of the switch.
  const std::string& joined_current() const { return edm_->joined_current(); }
  const std::string& joined_payload() const { return edm_->joined_payload(); }

 private:
  explicit Elastic(std::shared_ptr<edm::Launcher> launcher) : launcher_(std::move(launcher)) {}
  std::shared_ptr<edm::Launcher> launcher_;
  std::unique_ptr<edm::DeviceManager> edm_;
};

struct ElasticRequest {
  vps::ParallelConfig to;
  std::vector<int> vacate;        // world ranks that must take no rank of `to` and leave
  edm::MpiLaunchSettings launch;  // how new processes start (world rank 0's; fixed at the first switch)
  std::string payload;            // rank 0's: reaches the processes this switch starts
  std::string job;                // rank 0's: carried to every process
  std::string mine;               // this process's: carried to every process
};

struct ElasticOutcome {
  SwitchStats stats;
  bool left = false;              // this process holds nothing and must end now
  std::string job;                // rank 0's job blob
  std::vector<std::string> mine;  // every process's blob, by its world rank before the switch
  int world_before = 0, world_after = 0;
  double spawn_seconds = 0;  // starting the new processes and merging them (rank 0's)
};

// The whole switch on a process of the running job: prepare_processes + commit_processes.
// Throws InputError as above.
ElasticOutcome switch_processes(Manager& manager, const ElasticRequest& request);
// Its two halves. prepare_processes validates and refuses what only rank 0 can tell (both
// collective over the world), then starts the EDM's prepare on its thread and returns: new
// processes start while the caller goes on (its collectives must not use the EDM's
// communicators, which they cannot reach). commit_processes, collective over the world at the
// caller's next step boundary: waits for the prepare, throws InputError if it was refused
// (processes could not be started; nothing moved), else carries `job` / `mine` and moves the
// state; its times count from `started`. One prepare at a time; the prepare does not use
// `request.job` and `request.mine`.
void prepare_processes(Manager& manager, const ElasticRequest& request);
ElasticOutcome commit_processes(Manager& manager, const std::string& job, const std::string& mine,
                                std::chrono::steady_clock::time_point started);
// On a joined manager (Manager's joining constructor): the rest of the switch that started
// this process; afterwards it holds its state in the new layout.
ElasticOutcome finish_join(Manager& manager);

// A shrink or vacate that starts no process, over the manager's world itself (a world that
// cannot start processes: torch.distributed's). Rank r of `to` goes to world process
// in_place_placement(...)[r]; a process named by none holds nothing afterwards (`left`). The
// caller carries its own blobs, and gives the survivors their new world (rank r: the process of
// rank r) with Manager::set_world. Collective over the world; InputError on every rank before
// anything moves.
ElasticOutcome switch_in_place(Manager& manager, const vps::ParallelConfig& to, const std::vector<int>& vacate);
// The world process of each rank of a `ranks`-rank layout on `world_size` processes of which
// `vacate` leave (edm/vacate.h, shared with the CLI trainer).
using edm::in_place_placement;

// A lost process recovered in place (torch.distributed): the manager's world is already the
// survivors' (set_world), process i of it held rank survivors[i] of the current layout, of
// `world_before` ranks. The state of `to` is built from what the survivors hold, the lost ranks
// taken to hold nothing; rank r of `to` goes to process r. Collective over the survivors' world.
// `copies` (rank of the layout before, survivors' world process; every survivor's, sorted by
// rank, equal on every survivor): the copies the survivors hold (Manager::copies()), sources
// for the lost ranks' boxes; with copies the grads are zeroed, not moved (copies keep none).
// InputError on every survivor before anything moves when no survivor holds some box, not even
// in a copy (naming the first few: a checkpoint is needed), or `to` needs more processes.
ElasticOutcome recover_in_place(Manager& manager, const vps::ParallelConfig& to, const std::vector<int>& survivors,
                                int world_before, const std::vector<plan::SwitchPlacement::Copy>& copies = {});

// Why `vacate` is not a valid vacate list for a world of `world_size` (edm/vacate.h).
using edm::vacate_problem;

}  // namespace dynatrain::python
