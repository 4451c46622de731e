// A survivor's compute stopped as soon as another survivor met a lost process (job/lost_peer.h).
//
// A process lost mid-step is met first by the survivors in a collective with it; a survivor
// computing apart from it (the other pipeline of a dp pair, say) would only meet the loss at
// its next collective, a whole forward and backward later (seconds at GB scale), while the
// others wait for it in the agreement. The first survivor to meet the loss raises the world's
// mark in the rendezvous store (raise_loss_mark); on every process a thread polls that mark on
// a connection of its own and raises a flag the trainer reads between layers
// (train::TrainerOptions::interrupt), which then abandons its step with train::StepInterrupted.
// Sooner still, a process of the same node: each look also reads the /proc line of the watched
// world's processes on this node, where a process a signal is ending shows it as its exit begins
// (job/proc_stat.h: before the kernel has freed its memory, ~0.1 s at 2 GB, and long before a
// collective meets it); and under `dynatrain launch --keep-going` the launcher reports such a
// process through a pipe (job/sibling_loss.h), which the watch waits on between its looks. Either
// way the watch raises the world's mark itself: every survivor, on every node, stops within a
// look of the kill, before any of them met the loss in a collective. A look sees a killed
// process while its exit runs and until its parent reaps it (a parent that reaps at once and
// gives no pipe can hide a small process from it); a process of another node is seen by its
// own node's survivors. Whatever no look sees is met in a collective.
//
//   std::atomic<bool> interrupt{false};       // outlives the watch
//   options.interrupt = &interrupt;
//   LossWatch watch(support.store(world), interrupt);  // a store connection of its own
//   watch.watch(loss_mark_key(world_keys), place_keys);  // at the start and after every change of world
//   ... a collective fails: raise_loss_mark(store, loss_mark_key(world_keys)); recover ...
//
// Invariant: the flag is raised only by the mark of the world being watched: watch() lowers it
// and a poll of the world before cannot raise it again; a reported or seen pid raises it only
// when the watched world's places name it on this node (a process lost in the world before,
// reported late, is not one of them), and a look only when the process there is the one the
// place names (its start time) and a signal ends it (not an exit: a vacate, the job's end).
// Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/key_store.h"
#include "job/lost_peer.h"
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
  // store keys where the world's processes announce their places (job/lost_peer.h
  // announce_place), each read once when announced: the processes of this node among them are
  // the ones the launcher's reports and the looks at /proc are about.
  void watch(const std::string& key, std::vector<std::string> place_keys = {});

  // How many times this watch raised the mark itself (the launcher reported, or a look saw, a
  // process of this node killed): this process was the first to know.
  int raised_first() const { return raised_first_; }

 private:
  // The watched world's processes on this node, as far as announced (the watch thread's own).
  struct Peers {
    std::uint64_t generation = 0;     // of the watch() call they belong to
    std::vector<std::string> unread;  // place keys not announced yet
    std::vector<ProcessPlace> here;   // this node's processes, this one left out
  };

  void run();
  // Until the period passes, the launcher reports, or the destructor wakes the thread.
  void wait_for_news();
  // Reads the places announced since the last look (outside mu_).
  void read_new_places();
  // Whether a process of this node was reported by the launcher or is seen killed.
  bool peer_lost(const std::vector<long>& reported) const;

  std::unique_ptr<comm::KeyStore> store_;
  const std::chrono::milliseconds period_;
  std::atomic<bool>& flag_;
  std::mutex mu_;
  int wake_ = -1;                                // an eventfd: the destructor's call to stop
  std::string key_;                              // under mu_; empty: nothing to watch yet
  std::vector<std::string> place_keys_;          // under mu_
  std::uint64_t generation_ = 0;                 // under mu_: watch() calls so far
  Peers peers_;                                  // the watch thread's only
  std::unique_ptr<SiblingLossReader> siblings_;  // the watch thread's only
  std::atomic<int> raised_first_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dynatrain::job
