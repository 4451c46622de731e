// A survivor's compute stopped as soon as another survivor met a lost process (job/lost_peer.h).
//
// A process lost mid-step is met first by the survivors in a collective with it; a survivor
// computing apart from it (the other pipeline of a dp pair, say) would only meet the loss at
// its next collective, a whole forward and backward later (seconds at GB scale), while the
// others wait for it in the agreement. The first survivor to meet the loss raises the world's
// mark in the rendezvous store (raise_loss_mark); on every process a thread polls that mark on
// a connection of its own and raises a flag the trainer reads between layers
// (train::TrainerOptions::interrupt), which then abandons its step with train::StepInterrupted.
//
//   std::atomic<bool> interrupt{false};       // outlives the watch
//   options.interrupt = &interrupt;
//   LossWatch watch(support.store(world), interrupt);  // a store connection of its own
//   watch.watch(loss_mark_key(world_keys));   // at the start and after every change of world
//   ... a collective fails: raise_loss_mark(store, loss_mark_key(world_keys)); recover ...
//
// Invariant: the flag is raised only by the mark of the world being watched: watch() lowers it
// and a poll of the world before cannot raise it again. Torch-free.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/key_store.h"

namespace dynatrain::job {

// The store key that marks a loss met in the world whose keys are `world_keys`.
std::string loss_mark_key(const std::string& world_keys);
// Raises the mark (any survivor, as soon as it meets the loss; idempotent). CommError when the
// store does not answer.
void raise_loss_mark(comm::KeyStore& store, const std::string& key);

class LossWatch {
 public:
  // `period`: between two looks at the mark (one store query each), the longest a survivor
  // computes on after the mark was raised, besides the layer it is in.
  LossWatch(std::unique_ptr<comm::KeyStore> store, std::atomic<bool>& flag,
            std::chrono::milliseconds period = std::chrono::milliseconds(50));
  ~LossWatch();  // stops and joins the thread
  LossWatch(const LossWatch&) = delete;
  LossWatch& operator=(const LossWatch&) = delete;

  // From now on watches `key` (the newest world's mark), and lowers the flag.
  void watch(const std::string& key);

 private:
  void run();

  std::unique_ptr<comm::KeyStore> store_;
  const std::chrono::milliseconds period_;
  std::atomic<bool>& flag_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string key_;  // under mu_; empty: nothing to watch yet
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dynatrain::job
