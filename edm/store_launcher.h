// Launcher of a job whose world the environment describes (torch.distributed's way: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT from `dynatrain launch`, torchrun or a scheduler; the
// world runs over c10d, comm/c10d). Processes leave it (a shrink, a vacated notice) and join it
// through its rendezvous store (comm/c10d/c10d_membership.h):
//
//   grow   world rank 0 takes the grow's key `dynatrain/grow<N>` from the store's counter,
//          publishes the offer (how many join, the job's size, the job's command) and names it
//          at `dynatrain/grow/offer`; then it starts the joining processes on its own host
//          (this program, its arguments, DYNATRAIN_JOIN=HOST:PORT of the store and a
//          torch.distributed world of their own: RANK 0..K-1, MASTER_ADDR 127.0.0.1, a free
//          MASTER_PORT), unless DT_JOIN_EXTERNAL=1: then `dynatrain launch --join HOST:PORT
//          --np K -- CMD` starts them, on any host. It decides: `go` once every joiner took a
//          slot and runs the job's command, else why not (a joiner it started ended, a
//          joiner's command differs, DT_RENDEZVOUS_S passed) and sets the verdict; every process
//          of the job reads it from the store (LaunchRefused on all alike). On `go` the job's
//          processes (ranks 0..n-1) and the joiners (n + slot) build the grown world over the
//          store under `<key>/world` (a joiner gone before it connects fails that build on
//          every process: LaunchRefused alike, after the group's timeout). All of it runs on
//          the device manager's thread, behind training steps.
//   join   in a process with DYNATRAIN_JOIN set: connects to that store, waits for an offer,
//          takes the next slot, publishes its command and waits for the verdict; on `go` it
//          builds its side of the grown world (JoinRefused otherwise, naming why).
//
// Invariant: world rank 0 of the job's first world hosts the rendezvous store over which every
// later group of the job is built, so it never leaves while the job goes on: a vacate naming it
// is refused (cannot_vacate), and a placement must keep it. The trainer's placements give new
// rank 0 to process 0 (plan::Placement, "rank 0 kept on process 0"), so the store's host stays
// world rank 0 of every world the job adopts (a grow appends the joiners after it).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/key_store.h"
#include "edm/launcher.h"

namespace dynatrain::edm {

// A process started to join a job by its store (DYNATRAIN_JOIN) could not join it; what() is
// the one line the process ends with.
class JoinRefused : public InputError {
 public:
  using InputError::InputError;
};

// What the store launcher needs of the c10d backend (the torch side fills it: tools/).
struct StoreMembership {
  // A connection of this process's own to `world`'s store, and where that store listens.
  std::function<std::unique_ptr<comm::KeyStore>(const comm::Transport& world)> job_store;
  std::function<std::string(const comm::Transport& world)> address;
  // The job's side of the grown world (collective with the joiners): `world`'s processes first.
  std::function<std::unique_ptr<comm::Transport>(const comm::Transport& world, const std::string& key, int size)>
      grown_world;
  // A joining process's side: a connection to the store at an address, and rank `rank` of
  // `size` of the world built under `key` there.
  std::function<std::unique_ptr<comm::KeyStore>(const std::string& address)> connect;
  std::function<std::unique_ptr<comm::Transport>(const std::string& address, const std::string& key, int rank,
                                                 int size)>
      joined_world;
  // What every process of the job runs and every joiner must run (the arguments after the
  // program's name, and anything else the processes must share, e.g. whether a lost process is
  // recovered), compared as text.
  std::string command;
  // What world rank 0 starts for a grow, with this process's arguments (empty: this program).
  std::string executable;
  // How long a grow waits for its joiners, and a joiner for an offer and a verdict.
  std::chrono::milliseconds rendezvous{std::chrono::minutes(5)};
};

// Without `membership` (a store that processes outside the job cannot reach) a grow is refused
// by name; processes still leave.
std::unique_ptr<Launcher> make_store_launcher(std::shared_ptr<const StoreMembership> membership = nullptr);

}  // namespace dynatrain::edm
