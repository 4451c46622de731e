#include "job/loss_watch.h"

#include "common/error.h"

namespace dynatrain::job {

std::string loss_mark_key(const std::string& world_keys) { return "dynatrain/" + world_keys + "/loss_met"; }

void raise_loss_mark(comm::KeyStore& store, const std::string& key) { store.add(key, 1); }

LossWatch::LossWatch(std::unique_ptr<comm::KeyStore> store, std::atomic<bool>& flag, std::chrono::milliseconds period)
    : store_(std::move(store)), period_(period), flag_(flag) {
  DT_CHECK(store_ != nullptr, "LossWatch without a store");
  thread_ = std::thread([this] { run(); });
}

LossWatch::~LossWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LossWatch::watch(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  key_ = key;
  flag_ = false;
}

void LossWatch::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    if (key_.empty() || flag_) continue;
    const std::string key = key_;
    lock.unlock();
    bool raised = false;
    try {
      raised = store_->has(key);
    } catch (const CommError&) {  // the store's host is gone: the survivors meet it themselves
      lock.lock();
      return;
    }
    lock.lock();
    if (raised && key == key_) flag_ = true;  // not a world watched before
  }
}

}  // namespace dynatrain::job
