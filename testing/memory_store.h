// A comm::KeyStore in this process's memory, for tests of protocols that agree through a job's
// rendezvous store (job/lost_peer.h, edm/store_launcher.h) with threads for processes.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "comm/key_store.h"
#include "common/error.h"

namespace dynatrain::testing {

class MemoryStore final : public comm::KeyStore {
 public:
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::lock_guard lock(mu_);
    auto& v = values_[key];
    const std::int64_t sum = (v.empty() ? 0 : std::stoll(v)) + delta;
    v = std::to_string(sum);
    changed_.notify_all();
    return sum;
  }
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard lock(mu_);
    values_[key] = value;
    changed_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; }))
      throw CommError("store get " + key + ": timed out");
    return values_[key];
  }
  bool has(const std::string& key) override {
    std::lock_guard lock(mu_);
    return values_.count(key) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// A connection of one's own to a shared MemoryStore (what each process's connection is to the
// real store).
class StoreConnection final : public comm::KeyStore {
 public:
  explicit StoreConnection(std::shared_ptr<MemoryStore> store) : store_(std::move(store)) {}
  std::int64_t add(const std::string& k, std::int64_t d) override { return store_->add(k, d); }
  void set(const std::string& k, const std::string& v) override { store_->set(k, v); }
  std::string get(const std::string& k, std::chrono::milliseconds t) override { return store_->get(k, t); }
  bool has(const std::string& k) override { return store_->has(k); }

 private:
  std::shared_ptr<MemoryStore> store_;
};

}  // namespace dynatrain::testing
