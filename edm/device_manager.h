// The elastic device manager (EDM): owns the job's world (which processes take part, in which
// rank order), the communicators of every layout (through the cache), and the background
// thread that prepares the next layout while training steps run.
//
// A switch has two phases (design.md §5):
//   prepare(config, work)  collective over the current world, returns at once. On the EDM's
//                          thread: wake ranks outside the current layout; agree (rank 0
//                          decides) whether the switch can happen; grow the world (launcher)
//                          or split off the processes that stay; build or fetch the layout's
//                          communicators; then run `work` (the caller's local part: plan,
//                          memory). Collectives run on `control`, a communicator of the EDM's
//                          own, never interleaved with training collectives.
//   wait_prepared()        the commit's first call: joins the thread, rethrows its error.
//   adopt()                after the caller moved the state (on transition_world()): the
//                          prepared world becomes the world; leaving ranks get left() == true.
//
// Process ids: world ranks of the first job keep ids 0..n-1; processes started by a grow get the
// next unused ids, never reused. The cache keys layouts by these ids.
//
// Threads: the EDM's thread and the caller's thread touch disjoint communicators; MPI must give
// MPI_THREAD_MULTIPLE (comm::MpiSession checks it). Ranks outside the current layout never spin
// in a collective while others train: they sleep-poll for rank 0's wake-up (wait_for_root).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport.h"
#include "edm/communicators.h"
#include "edm/launcher.h"
#include "edm/switch_decision.h"

namespace dynatrain::edm {

// Phases of ranks outside the current layout, woken by rank 0 (tags on `control`).
enum class Wake : int { kPrepare = 201, kCommit = 202, kFinish = 203 };

struct Prepared {
  vps::ParallelConfig config;
  std::string refused;  // non-empty: the switch cannot happen (one line); nothing changed
  std::string note;     // non-empty: something the user should know (e.g. why nobody left)
  int world_before = 0, world_after = 0;
  bool leaving = false;                        // this process is not part of the next world
  std::vector<int> process_of_rank;            // placement of the next layout in the transition world
  std::shared_ptr<const Communicators> comms;  // of `config` (nullptr on ranks outside it)
  std::uint64_t creations = 0;                 // communicators created by this prepare (cache + worlds)
  double seconds = 0;                          // wall time of the prepare on this rank
  double hidden_seconds = 0;                   // part of it that ended before wait_prepared() was called
  double spawn_seconds = 0;                    // of which starting processes and merging them
};

class DeviceManager {
 public:
  // A world of the processes started together (ids 0..n-1). `world` must outlive the EDM.
  // `layout_groups` false: prepares build no communicators of the next layout (Prepared::comms
  // stays nullptr), for callers that split their own; every process of the job (those a grow
  // starts included) must pass the same value.
  DeviceManager(comm::Transport& world, std::shared_ptr<Launcher> launcher, bool layout_groups = true);
  // In a process started by a grow: `joined` is Launcher::join()'s world. Collective with the
  // starters' prepare (receives the state of the job from world rank 0). Afterwards call
  // prepare_joined() to run the rest of that prepare in step with the starters.
  DeviceManager(std::unique_ptr<comm::Transport> joined, std::shared_ptr<Launcher> launcher, bool layout_groups = true);
  ~DeviceManager();
  DeviceManager(const DeviceManager&) = delete;
  DeviceManager& operator=(const DeviceManager&) = delete;

  comm::Transport& world() { return *world_; }
  comm::Transport& control() { return *control_; }
  const std::vector<ProcessId>& ids() const { return ids_; }
  CommunicatorCache& cache() { return cache_; }
  Launcher* launcher() const { return launcher_.get(); }
  bool left() const { return left_; }

  // In a joined process: the layout the job runs now, the one being prepared, and the caller's
  // payload of that prepare (e.g. the rest of the job's schedule).
  const std::string& joined_current() const { return joined_current_; }
  const std::string& joined_next() const { return joined_next_; }
  const std::string& joined_payload() const { return joined_payload_; }

  // `work` runs on the EDM's thread after the world and communicators are ready, with the rank's
  // index in the larger of the two worlds; it must not communicate.
  using Work = std::function<void(const Prepared&)>;
  // Placement: given the number of processes of the transition world (the current world, plus
  // those a grow starts), the process that takes each rank of the next layout (empty: rank r on
  // process r). Runs on the EDM's thread on every rank and must give the same answer on every
  // one (no communication). The process given rank 0 becomes the job's leader (it runs the
  // job's I/O); the caller hands the leader's state over in its commit.
  using Place = std::function<std::vector<int>(int processes)>;
  // Collective over world() (ranks outside `current` layout included); returns at once.
  // `payload` (rank 0's) reaches processes started by this prepare (joined_payload()).
  // With a placement that is not the identity, the next world is ordered by it: process
  // place()[r] becomes rank r, and processes that take no rank leave (or wait, idle, at the end).
  // `vacate`: world ranks that must take no rank of `next` and leave (a GPU reclaimed); as many
  // processes are started as the layout then lacks, and `place` must leave them out. Every rank
  // may be vacated, rank 0 included (a whole-job migration: the next world is all new processes).
  // `keep`: no process leaves even where the launcher would let it (a lend: the processes
  // outside `next` stay, idle, at the end of the world, for a later switch to take back).
  void prepare(const vps::ParallelConfig& current, const vps::ParallelConfig& next, Work work, std::string payload = {},
               Place place = {}, std::vector<int> vacate = {}, bool keep = false);
  // In a joined process, synchronously: the part of the starters' prepare after the grow (the
  // starters' placement arrives from them).
  void prepare_joined(const vps::ParallelConfig& next, Work work);
  bool preparing() const { return thread_.joinable() || prepared_ != nullptr; }
  // Processes the prepare thread is starting right now (spawn, merge and the join handshake),
  // else 0. Any thread may ask (the watchdog names a start that never finishes).
  int starting_processes() const { return starting_.load(std::memory_order_relaxed); }
  // Joins the prepare thread (rethrowing its error) and returns its result.
  Prepared& wait_prepared();
  // The world the transition runs on: the larger of the current and the prepared one (rank
  // indices are the same in both for every process in both).
  comm::Transport& transition_world();
  // The prepared world becomes the world. On leaving ranks left() becomes true and world()
  // must not be used any more.
  void adopt();
  // Drops a refused prepare.
  void discard();

  // Rank 0 wakes every rank of `world` at index >= first; those sleep-poll until woken.
  static void wake_from(comm::Transport& world, int first, Wake what);
  static void wait_for_root(comm::Transport& world, Wake what);

 private:
  void run_prepare(vps::ParallelConfig current, vps::ParallelConfig next, Work work, const std::string& payload,
                   const Place& place, const std::vector<int>& vacate, bool keep);
  SwitchDecision decide_prepare(comm::Transport& ctl, int need, const std::vector<int>& vacate, bool keep) const;
  bool grow_world(const vps::ParallelConfig& current, const vps::ParallelConfig& next, int need,
                  const std::string& payload, SwitchDecision decision);
  void settle_identity_world(const vps::ParallelConfig& next, int need, bool shrink);
  void after_grow(const vps::ParallelConfig& next, Work& work);
  void reorder(const vps::ParallelConfig& next, const std::vector<int>& process_of_rank, bool may_leave);

  // A world and its control communicator, shared with the world cache.
  struct World {
    std::shared_ptr<comm::Transport> world, control;
  };
  // Adds (world, control) under its processes in rank order.
  void remember_world(const std::vector<ProcessId>& order, std::shared_ptr<comm::Transport> world,
                      std::shared_ptr<comm::Transport> control);

  comm::Transport* world_ = nullptr;
  std::shared_ptr<comm::Transport> owned_world_, control_;
  // Worlds by their processes in rank order (the current one included), so that a placement
  // that orders the processes as a world seen before (a switch back under auto placement)
  // creates no communicator. Same contract as the CommunicatorCache: rank 0 of the transition
  // world decides hit or miss; entries with a process that left are dropped in adopt().
  std::map<std::vector<ProcessId>, World> worlds_;
  std::vector<ProcessId> ids_;
  ProcessId next_id_ = 0;
  std::shared_ptr<Launcher> launcher_;
  CommunicatorCache cache_;
  bool layout_groups_ = true;
  bool left_ = false;
  std::string joined_current_, joined_next_, joined_payload_;

  // The prepare in flight: filled by the EDM's thread, read after join.
  std::thread thread_;
  std::unique_ptr<Prepared> prepared_;
  std::exception_ptr error_;
  std::shared_ptr<comm::Transport> next_world_, next_control_;
  // A grow that is then reordered by placement: the merged world (the transition's) and its
  // control, kept until adopt().
  std::unique_ptr<comm::Transport> grown_world_, grown_control_;
  std::vector<ProcessId> next_ids_;
  ProcessId next_next_id_ = 0;
  double prepare_start_ = 0, prepare_end_ = 0;
  std::atomic<int> starting_{0};
};

}  // namespace dynatrain::edm
