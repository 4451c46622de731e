// A key-value store every process of a job reaches, outside the job's communicators (c10d's
// TCPStore, the rendezvous of a job started from the environment): small agreements that must
// work while the communicators are broken, e.g. which processes survived a lost one
// (job/lost_peer.h). Torch-free; comm/c10d/c10d_recovery.h makes one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dynatrain::comm {

class KeyStore {
 public:
  virtual ~KeyStore() = default;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the sum; add(key, 0) reads.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value at `key`, waiting up to `timeout` for it to be set (CommError past it).
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Whether `key` is set, without waiting.
  virtual bool has(const std::string& key) = 0;
};
// Every call throws CommError when the store does not answer (its host is gone).

}  // namespace dynatrain::comm
