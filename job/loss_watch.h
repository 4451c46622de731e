// A survivor's compute stopped as soon as another survivor met a lost process (job/lost_peer.h).
//
// A process lost mid-step is met first by the survivors in a collective with it; a survivor
// computing apart from it (the other pipeline of a dp pair, say) would only meet the loss at
// its next collective, a whole forward and backward later (seconds at GB scale), while the
// others wait for it in the agreement. The first survivor to meet the loss raises the world's
// mark in the rendezvous store (raise_loss_mark); on every process a thread polls that mark on
// a connection of its own and raises a flag the trainer reads between layers
// (train::TrainerOptions::interrupt), which then abandons its step with train::StepInterrupted.
// Sooner still: under `dynatrain launch --keep-going` the launcher reports a killed process to
// the others of its node through a pipe (job/sibling_loss.h); the watch wakes on it at once
// (it waits on the pipe between its looks at the mark), and when the pid is one of the watched world's processes on this node (their places' store
// keys, given with the world) it raises the world's mark itself: every survivor, on every node,
// stops within a look of the kill, before any of them met the loss in a collective.
//
//   std::atomic<bool> interrupt{false};       // outlives the watch
//   options.interrupt = &interrupt;
//   LossWatch watch(support.store(world), interrupt);  // a store connection of its own
//   watch.watch(loss_mark_key(world_keys), place_keys);  // at the start and after every change of world
//   ... a collective fails: raise_loss_mark(store, loss_mark_key(world_keys)); recover ...
//
// Invariant: the flag is raised only by the mark of the world being watched: watch() lowers it
// and a poll of the world before cannot raise it again; a reported pid raises it only when the
// watched world's places name it on this node (a process lost in the world before, reported
// late, is not one of them). Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/key_store.h"
#include "job/sibling_loss.h"

namespace dynatrain::job {

// The store key that marks a loss met in the world whose keys are `world_keys`.
std::string loss_mark_key(const std::string& world_keys);
// Raises the mark (any survivor, as soon as it meets the loss; idempotent). CommError when the
// store does not answer.
void raise_loss_mark(comm::KeyStore& store, const std::string& key);

class LossWatch {
 public:
  // `period`: between two looks at the mark (one store query each), the longest a survivor
  // computes on after another raised the mark, besides the layer it is in; the launcher's pipe
  // is read as soon as it has a report.
  // `siblings`: the launcher's reports (none by default: the inherited pipe when there is one).
  LossWatch(std::unique_ptr<comm::KeyStore> store, std::atomic<bool>& flag,
            std::chrono::milliseconds period = std::chrono::milliseconds(50),
            std::unique_ptr<SiblingLossReader> siblings = std::make_unique<SiblingLossReader>());
  ~LossWatch();  // stops and joins the thread
  LossWatch(const LossWatch&) = delete;
  LossWatch& operator=(const LossWatch&) = delete;

  // From now on watches `key` (the newest world's mark), and lowers the flag. `place_keys`: the
  // store keys where the world's processes announce "NODE PID" (job/lost_peer.h announce_place),
  // read only when the launcher reports a pid.
  void watch(const std::string& key, std::vector<std::string> place_keys = {});

  // How many times the launcher's report raised the mark (this process was the first to know).
  int raised_by_launcher() const { return raised_by_launcher_; }

 private:
  void run();
  // Until the period passes, the launcher reports, or the destructor wakes the thread.
  void wait_for_news();
  // Whether the launcher reported one of the watched world's processes (outside mu_).
  bool sibling_lost(const std::vector<long>& pids, const std::vector<std::string>& place_keys);

  std::unique_ptr<comm::KeyStore> store_;
  const std::chrono::milliseconds period_;
  std::atomic<bool>& flag_;
  std::mutex mu_;
  int wake_ = -1;                                // an eventfd: the destructor's call to stop
  std::string key_;                              // under mu_; empty: nothing to watch yet
  std::vector<std::string> place_keys_;          // under mu_
  std::unique_ptr<SiblingLossReader> siblings_;  // the watch thread's only
  std::atomic<int> raised_by_launcher_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dynatrain::job
