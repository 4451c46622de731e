// A lost process of `dynatrain train` on torch.distributed, recovered in place by the
// survivors (the protocol: job/lost_peer.h). A loss is met as a CommError from a collective of
// a step or of the boundary before it (a save, the agreement on notices, a request, a switch's
// prepare or commit), or as train::StepInterrupted in a step's compute once another survivor
// met it (job/loss_watch.h); the interrupted step, or the whole boundary, is done again. Not
// recovered: a loss during a commit's transfer (the state is whole in neither layout) or while
// processes are idle outside the layout. Every survivor keeps its pid.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/bytes.h"
#include "common/clock.h"
#include "common/error.h"
#include "job/mpi_world.h"
#include "job/supervisor.h"
#include "job/train_job_run.h"

namespace dynatrain::job {
using train::StepStats;

std::optional<StepStats> TrainJob::step_or_recover() {
  if (!lost_.store) return train_step();
  announce_if_new_world();
  try {
    return train_step();
  } catch (const CommError& e) {
    watchdog_.disarm();
    recover_from_loss(e, false);
    // A survivor met the loss in the boundary (a peer's collective there completed for this
    // process, not for it), or completed the step after the others: every survivor does the
    // boundary again (this process, having completed the step, the one after it), then the step.
    if (lost_.boundary_again && !boundary_or_recover()) s_.ended = true;
    return std::nullopt;
  }
}

bool TrainJob::boundary_or_recover() {
  while (true) {
    if (!lost_.store) return boundary();
    announce_if_new_world();
    try {
      return boundary();
    } catch (const CommError& e) {  // a save, the notices' agreement, a request, a prepare, a commit
      watchdog_.disarm();
      const bool completed = recover_from_loss(e, true);
      DT_CHECK(!completed, "a step's update completed after a loss met in the boundary");
    }
  }
}

// Each world's processes publish their node and pid once (the decision of a recovery tells a
// process that ended on its node from one that is only slow), and each process keeps the table
// once all have (the survivors of a lost store name their node's reporter from it). The keys
// are the world's own (LostPeerSupport::world_keys: the same on its members, processes that
// joined it included, and new with every change of processes).
void TrainJob::announce_if_new_world() {
  const std::string keys = "train/" + args_.lost_peer->world_keys(trainer_->world());
  if (keys == lost_.world) {
    known_places();
    return;
  }
  lost_.world = keys;
  lost_.places.clear();
  const std::string places = "dynatrain/" + keys + "/places";
  lost_.watch->watch(loss_mark_key(keys), place_keys(places, trainer_->world_size()));
  announce_place(*lost_.store, places, trainer_->world().rank());
}

// The newest world's places: the table kept, read again from the store while a process of the
// world has not announced (pid 0).
const std::vector<ProcessPlace>& TrainJob::known_places() {
  const bool complete =
      lost_.places.size() == static_cast<std::size_t>(trainer_->world_size()) &&
      std::none_of(lost_.places.begin(), lost_.places.end(), [](const ProcessPlace& p) { return p.pid == 0; });
  if (!complete)
    lost_.places = announced_places(*lost_.store, "dynatrain/" + lost_.world + "/places", trainer_->world_size());
  return lost_.places;
}

// A loss met in a step's commit barrier (the lost process died in it): the barrier completed
// on some survivors, who applied the update and went on, and not on others, who had done every
// collective of the step too (they were in the barrier). Those apply it now, so that every
// survivor holds the state after the step; the leader among them reports it. Returns whether
// this process did.
bool TrainJob::complete_step_others_applied(comm::Transport& survivors) {
  const std::int64_t done = trainer_->steps_done();
  std::int64_t most = done;
  for (const auto& [steps] : comm::all_gather_values(survivors, std::array<std::int64_t, 1>{done}))
    most = std::max(most, steps);
  if (most == done || !trainer_->update_ready()) return false;  // (not ready: Trainer::recover refuses)
  const StepStats st = trainer_->apply_ready_update();
  if (s_.leader) report_step(st);
  ++s_.step;
  return true;
}

namespace {

// Every survivor's figures of a recovery (recover_from_loss), combined on each: 5 and 6 summed
// (counts of survivors), 7 the earliest (when the loss was first met), the others the largest.
std::array<double, 9> combine_over_survivors(comm::Transport& survivors, const std::array<double, 9>& mine) {
  std::array<double, 9> most = mine;
  most[5] = most[6] = 0;
  for (const auto& f : comm::all_gather_values(survivors, mine)) {
    for (std::size_t i : {0, 1, 2, 3, 4, 8}) most[i] = std::max(most[i], f[i]);
    most[5] += f[5];
    most[6] += f[6];
    most[7] = std::min(most[7], f[7]);
  }
  return most;
}

}  // namespace

bool TrainJob::recover_from_loss(const CommError& error, bool in_boundary) {
  const auto t0 = Clock::now();
  const double met_unix_s = unix_seconds();
  comm::Transport& old = trainer_->world();
  const int before = old.size(), me = old.rank();
  // Processes outside the layout (idle) wait elsewhere than in a step, and a commit's transfer
  // leaves the state whole in neither layout: not recovered.
  if (trainer_->config().world_size() != before || !trainer_->state_intact()) throw error;
  args_.lost_peer->abandon();
  const std::string key =
      lost_.world + "/recovery";  // a world is recovered from once: its successor has keys of its own
  std::vector<ProcessPlace> places;
  std::vector<int> members;
  double agree_s = 0, world_s = 0;
  try {
    raise_loss_mark(*lost_.store, loss_mark_key(lost_.world));  // the survivors still computing stop
    places = known_places();
    members = agree_survivors(*lost_.store, "dynatrain/" + key, places, me, {watchdog_seconds(), 1.0});
    agree_s = seconds_since(t0);
  } catch (const LeftOutOfAgreement& e) {  // too late: the others went on without this process
    end_after_loss(true, detail::concat(e.what(), "; it leaves"));
  } catch (const CommError& e) {  // the store is gone with its host, world rank 0
    end_store_lost(lost_.places, me, e);
  }
  if (static_cast<int>(members.size()) == before) throw error;  // nobody lost: the error stands
  const bool first = me == members.front();
  const std::string lost = lost_text(places, members) + " of " + std::to_string(before);
  vps::ParallelConfig to;
  try {
    to = choose_restart_layout(o_, trainer_->config(), static_cast<int>(members.size()));
  } catch (const InputError& e) {
    end_after_loss(first, detail::concat("lost ", lost, ": ", e.what()));
  }
  train::Trainer::Recovery r;
  const auto tw = Clock::now();
  bool completed = false;
  try {
    auto world = args_.lost_peer->members_world(old, key + "/world", members);
    world_s = seconds_since(tw);
    completed = complete_step_others_applied(*world);
    r = trainer_->recover(std::move(world), to);
  } catch (const InputError& e) {
    end_after_loss(first, detail::concat("lost ", lost, ": ", e.what()));
  }
  comm::Transport& now = trainer_->world();
  note_world_after_switch(now);  // failure lines name the new world's ranks
  note_layout_for_notices();
  s_.preparing.clear();  // a switch being prepared met the loss: the next boundary prepares it again
  // The figures, max over the survivors: the pause (loss met -> state rebuilt), the agreement,
  // the survivors' world; whether any survivor met the loss in the boundary, and whether this
  // step's save completed (world rank 0 commits it last: its word counts for every survivor);
  // how many survivors the loss's mark stopped mid-step, and how many completed the step's
  // update after the others (sums). A survivor that completed the step goes on to the boundary
  // after it, which the others (who met the loss there or in the step after it) do again.
  const bool saved = me == 0 && s_.saved == s_.step;
  const bool stopped = dynamic_cast<const train::StepInterrupted*>(&error) != nullptr;
  // And on the wall clock (to line up with a kill's stamp): the first survivor's meeting of the
  // loss, the last one's state rebuilt (the bound's probe, after it, left out).
  const std::array<double, 9> mine = {seconds_since(t0) - r.probe_s, agree_s,           world_s,
                                      in_boundary ? 1.0 : 0.0,       saved ? 1.0 : 0.0, stopped ? 1.0 : 0.0,
                                      completed ? 1.0 : 0.0,         met_unix_s,        unix_seconds() - r.probe_s};
  const std::array<double, 9> most = combine_over_survivors(now, mine);
  lost_.boundary_again = most[3] > 0 || most[6] > 0;
  s_.saved = most[4] > 0 ? s_.step : -1;
  if (s_.leader)
    report_recovery(
        lost, r, {most[0], most[1], most[2], static_cast<int>(most[5]), static_cast<int>(most[6]), most[7], most[8]});
  reserve_for_recovery();  // for the next loss (after the line: not in the pause)
  return completed;
}

// --redundancy 2: the state at this boundary also kept by a process on another node
// (Trainer::refresh_copies; who keeps whose: edm/copy_holders.h over the processes' nodes), so
// that the survivors of a lost node rebuild its ranks' state from memory. In a new world every
// process first announces its node. Every process on one node: refused at the first boundary;
// after a recovery left them there, the copies stop (the leader says so once). Not while
// processes are idle outside the layout.
void TrainJob::refresh_remote_copies() {
  if (!args_.lost_peer || args_.redundancy != 2 || lost_.copies_stopped || !trainer_->active() ||
      trainer_->world_size() != trainer_->config().world_size() || s_.step >= args_.steps)
    return;
  announce_if_new_world();
  if (lost_.copies_world != lost_.world) {
    trainer_->world().barrier();  // every process of this world announced its node
    lost_.copies_world = lost_.world;
  }
  std::vector<std::string> nodes;
  for (const ProcessPlace& p : known_places()) nodes.push_back(p.node);
  const auto t0 = Clock::now();
  try {
    trainer_->refresh_copies(nodes);
  } catch (const InputError& e) {  // every process on one node: no other node to keep a copy on
    if (!lost_.copies_held)
      throw InputError(detail::concat("--redundancy 2 keeps each process's state in the memory of a process on ",
                                      "another node, but every process of the job is on node ", nodes.front(),
                                      " (DYNATRAIN_NODE, else the host name); valid on one node: --redundancy 0"));
    lost_.copies_stopped = true;
    if (s_.leader)
      std::printf("redundancy 2: every process is on node %s now: no copy is kept (a loss of this node ends the job)\n",
                  nodes.front().c_str());
    return;
  }
  const double took = seconds_since(t0);
  lost_.copies_held = true;
  lost_.copy_bytes = trainer_->copy_bytes();
  lost_.refresh_s += took;
  lost_.refresh_max_s = std::max(lost_.refresh_max_s, took);
  ++lost_.refreshes;
}

// --recovery-reserve: the memory a recovery from one more lost process would add here (from
// this layout into the one job/survivor_layout.h picks for one process fewer), made resident
// now and kept in the trainer's pool, so that the recovery takes warm pages instead of waiting
// for fresh ones (from the host, on a virtual machine: 0.4 GB/s measured). At the start, after
// every commit and after every recovery; the leader says the first time.
void TrainJob::reserve_for_recovery() {
  if (!args_.recovery_reserve || trainer_->left() || !trainer_->active() || trainer_->world_size() < 2) return;
  vps::ParallelConfig to;
  try {
    to = choose_restart_layout(o_, trainer_->config(), trainer_->world_size() - 1);
  } catch (const InputError&) {  // no layout for one process fewer: a loss would end the job anyway
    return;
  }
  const auto t0 = Clock::now();
  const std::size_t made = trainer_->reserve_for(to);
  if (s_.leader && !lost_.reserved_once)
    std::printf("recovery reserve: %s made resident in %.2f s on rank 0 for a loss into %s\n",
                format_bytes(static_cast<double>(made)).c_str(), seconds_since(t0), to.str().c_str());
  lost_.reserved_once = true;
}

// The store did not answer: its host, world rank 0, is lost (maybe with its node). One line from
// the lowest rank but 0 of each node whose process runs (rank 1 when no places are known). The
// others of its node end only once it has: a launcher that ends every rank when one exits
// non-zero (`dynatrain launch`, torchrun) would otherwise end it before its line. It stays 1 s
// after its line, so a survivor still in its step meets the loss while it runs (and stays
// silent).
void TrainJob::end_store_lost(const std::vector<ProcessPlace>& places, int me, const CommError& error) {
  std::string why = error.what();
  why = why.substr(0, why.find('\n'));
  const std::string here = node_name();
  int reporter = places.empty() ? 1 : -1;
  for (std::size_t r = 1; r < places.size() && reporter < 0; ++r)
    if (places[r].node == here && !process_gone(places[r].pid)) reporter = static_cast<int>(r);
  if (reporter != me) {
    const long pid = reporter > 0 && static_cast<std::size_t>(reporter) < places.size() ? places[reporter].pid : 0;
    const auto until = Clock::now() + std::chrono::duration<double>(watchdog_seconds());
    while (pid > 0 && !process_gone(pid) && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    end_after_loss(false, "");
  }
  std::fprintf(stderr,
               "dynatrain: error: the survivors on node %s could not agree through the torch.distributed store "
               "(%s): it lives in the process of world rank 0, whose loss cannot be recovered; start the job again "
               "from its newest checkpoint (--resume DIR of its --save)\n",
               here.c_str(), why.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  end_after_loss(false, "");
}

// A loss the survivors cannot recover from: one line (from `first`), every survivor ends, exit 1.
void TrainJob::end_after_loss(bool first, const std::string& why) {
  if (s_.csv.is_open()) s_.csv.flush();
  if (first) std::fprintf(stderr, "dynatrain: error: %s\n", why.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(1);
}

}  // namespace dynatrain::job
