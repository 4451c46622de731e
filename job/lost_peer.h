// A process of `dynatrain train` on torch.distributed lost (SIGKILL, the OOM killer, a crash),
// recovered in place with no process restarted (docs/reliability.md, "A lost process on
// torch.distributed"). Torch-free: the transport's part comes in LostPeerSupport.
//
// The protocol, on every survivor, after a step's collective failed (train/trainer.h: every
// step's update waits for a barrier after its last collective, so an interrupted step is
// applied by no survivor):
//   1. raise the world's loss mark in the store, so that a survivor computing apart from the lost
//      process stops its step at the next layer (job/loss_watch.h), and give the generation's
//      groups up (LostPeerSupport::abandon), so that a survivor waiting on another survivor
//      gets its error too;
//   2. agree who survived through the rendezvous store (agree_survivors): world rank 0, the
//      store's host, decides once every process has arrived or is known gone;
//   3. build the survivors' world over the store (LostPeerSupport::members_world);
//   4. rebuild the lost ranks' state from the replicas the survivors hold, in a layout for the
//      survivors (train::Trainer::recover), and do the interrupted step again.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/key_store.h"
#include "comm/transport.h"
#include "common/error.h"

namespace dynatrain::job {

// What the transport gives a recovery (comm/c10d/c10d_recovery.h for c10d).
struct LostPeerSupport {
  std::function<int()> abandon;  // shuts the current groups' connections
  std::function<std::unique_ptr<comm::KeyStore>(const comm::Transport& world)> store;
  // The store keys of `world`: the same on each of its members, unique to it.
  std::function<std::string(const comm::Transport& world)> world_keys;
  // Collective over `members` (ranks of `world`, ascending): their world, built under `key`.
  std::function<std::unique_ptr<comm::Transport>(const comm::Transport& world, const std::string& key,
                                                 const std::vector<int>& members)>
      members_world;
};

// Where a process runs: its node (DYNATRAIN_NODE, else the hostname) and pid.
struct ProcessPlace {
  std::string node;
  long pid = 0;
  unsigned long long start_ticks = 0;  // its start time (job/proc_stat.h); 0: unknown
};

// This process's node name: DYNATRAIN_NODE when set, else the hostname.
std::string node_name();

// Every process of a world publishes its place under `prefix` (once per world: after the start
// and after every change of its processes); announced_places reads them without waiting: a
// process that never announced is on node "(unknown)" (another node, to the decision).
void announce_place(comm::KeyStore& store, const std::string& prefix, int rank);
// A place as announce_place writes it ("NODE PID START"); nullopt when `text` is not one.
std::optional<ProcessPlace> parse_place(const std::string& text);
// Whether `place` is a process of this node (the same one: pid and start time) that a signal is
// ending or ended (SIGKILL, the OOM killer, a crash): known as its exit begins, before its
// memory is freed, its connections close or it can be reaped (job/proc_stat.h).
bool seen_killed_here(const ProcessPlace& place);
// The store keys announce_place writes for ranks 0..size-1 under `prefix` (a loss watch reads them).
std::vector<std::string> place_keys(const std::string& prefix, int size);
std::vector<ProcessPlace> announced_places(comm::KeyStore& store, const std::string& prefix, int size);

// A survivor that reached the agreement after it was decided without it: it must leave.
class LeftOutOfAgreement : public CommError {
 public:
  using CommError::CommError;
};

struct AgreeSettings {
  double deadline_s = 60;  // how long anyone waits for the decision (the watchdog's)
  double settle_s = 1.0;   // how long the decision waits, after the last arrival, for a process of
                           // another node (no survivor there can see it end)
};

// Step 2 above, called by every survivor of a world of `places.size()` processes with its own
// `rank`, under `prefix` (this recovery's own keys): the surviving ranks, ascending, the same on
// every survivor. World rank 0 decides: a rank counts when it arrived; it is lost when its
// process is gone or its exit has begun (job/proc_stat.h) on rank 0's node, or a survivor of its
// node reported so, or when it is on
// another node and nothing arrived for settle_s; past deadline_s, whoever arrived. CommError
// when the store does not answer (its host, world rank 0, is lost); LeftOutOfAgreement when
// this survivor reaches the agreement after it was decided without it. The one protocol of
// both recoveries: `dynatrain train`'s (train_job_recover.cc) and the Python module's
// (python/dynatrain/_recover.py, through its binding).
std::vector<int> agree_survivors(comm::KeyStore& store, const std::string& prefix,
                                 const std::vector<ProcessPlace>& places, int rank, const AgreeSettings& settings);

// The lost ranks by node, as the Python module names them: "rank 3 (pid 4243) on node h1", or
// "rank 2 (pid 4242), rank 3 (pid 4243) on node h2 (the whole node)" when every process of that
// node is lost; nodes joined with " and ".
std::string lost_text(const std::vector<ProcessPlace>& places, const std::vector<int>& survivors);

}  // namespace dynatrain::job
