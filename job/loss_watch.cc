#include "job/loss_watch.h"

#include <cstdlib>

#include "common/error.h"
#include "job/lost_peer.h"

namespace dynatrain::job {

std::string loss_mark_key(const std::string& world_keys) { return "dynatrain/" + world_keys + "/loss_met"; }

void raise_loss_mark(comm::KeyStore& store, const std::string& key) { store.add(key, 1); }

LossWatch::LossWatch(std::unique_ptr<comm::KeyStore> store, std::atomic<bool>& flag, std::chrono::milliseconds period,
                     std::unique_ptr<SiblingLossReader> siblings)
    : store_(std::move(store)), period_(period), flag_(flag), siblings_(std::move(siblings)) {
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

void LossWatch::watch(const std::string& key, std::vector<std::string> place_keys) {
  std::lock_guard<std::mutex> lock(mu_);
  key_ = key;
  place_keys_ = std::move(place_keys);
  flag_ = false;
}

bool LossWatch::sibling_lost(const std::vector<long>& pids, const std::vector<std::string>& place_keys) {
  const std::string here = node_name();
  for (const std::string& place : place_keys) {
    if (!store_->has(place)) continue;  // not announced (yet): not known as one of the world's
    const std::string text = store_->get(place, std::chrono::seconds(10));  // set: answered at once
    const auto space = text.rfind(' ');
    if (space == std::string::npos || text.compare(0, space, here) != 0 || space != here.size()) continue;
    const long pid = std::atol(text.c_str() + space + 1);
    for (long lost : pids)
      if (lost == pid) return true;
  }
  return false;
}

void LossWatch::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    const std::vector<long> reported = siblings_ ? siblings_->read_reported() : std::vector<long>{};
    if (key_.empty() || flag_) continue;
    const std::string key = key_;
    const std::vector<std::string> places = reported.empty() ? std::vector<std::string>{} : place_keys_;
    lock.unlock();
    bool raised = false;
    try {
      if (!places.empty() && sibling_lost(reported, places)) {  // first to know: tell every survivor
        raise_loss_mark(*store_, key);
        ++raised_by_launcher_;
        raised = true;
      }
      raised = raised || store_->has(key);
    } catch (const CommError&) {  // the store's host is gone: the survivors meet it themselves
      lock.lock();
      return;
    }
    lock.lock();
    if (raised && key == key_) flag_ = true;  // not a world watched before
  }
}

}  // namespace dynatrain::job
