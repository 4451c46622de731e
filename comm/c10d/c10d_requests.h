// Point-to-point requests of the c10d backend (c10d_transport.cc). Every message of the
// Transport is two Gloo messages on its own pair of slots: a header (the length, 8 bytes) on slot
// 2*tag and the payload on slot 2*tag+1. Gloo kills the process when a message is longer than
// the posted receive and silently accepts a shorter one, so the receiver posts the payload
// receive only once the header told the length: into the caller's buffer when it matches,
// else into a drain buffer of the sender's length (the stream stays aligned) and the wait
// throws CommError. One worker thread per active (peer, tag) channel posts payload receives in
// header order as headers arrive, so a send completes without its receiver having to wait.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm::c10d_detail {

using Work = c10::intrusive_ptr<c10d::Work>;
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;

inline int header_slot(int tag) { return 2 * tag; }
inline int payload_slot(int tag) { return 2 * tag + 1; }

// Waits for `work`; a c10d/Gloo failure becomes CommError "c10d rank R: <what>: <Gloo's line>".
void wait_work(const Work& work, int rank, const std::string& what);
// Rethrows the current exception as CommError with that prefix (CommError passes unchanged);
// rank -1: a process joining a job, with no rank yet ("c10d joining process: ...").
[[noreturn]] void rethrow_as_comm_error(int rank, const std::string& what);

// A request that can only block: test() hands the blocking wait to a helper thread (the
// engine only waits; test() serves occasional polls) and reports when it finished.
class BlockingRequest : public Request {
 public:
  void wait() final;
  bool test() final;

 protected:
  virtual void complete() = 0;  // blocks until done; throws CommError
  void settle() noexcept;       // derived destructors: wait, errors swallowed

 private:
  std::future<void> poll_;
  bool reported_ = false;
};

class SendRequest final : public BlockingRequest {
 public:
  SendRequest(const Group& group, int rank, const void* buf, std::size_t bytes, int peer, int tag);
  ~SendRequest() override { settle(); }

 private:
  void complete() override;
  std::uint64_t header_;
  std::vector<Work> works_;
  int rank_;
  std::string what_;
};

// One posted receive: its header's receive, and the payload's once the channel posted it.
struct PendingRecv {
  void* buf = nullptr;
  std::size_t bytes = 0;
  std::uint64_t header = 0;  // the sender's length, once header_work completed
  Work header_work, payload_work;
  std::vector<std::byte> drain;  // the payload when header != bytes
  std::mutex mu;
  std::condition_variable cv;
  bool posted = false;  // payload_work is set (or error): the worker is done with this one
  std::exception_ptr error;
};

// Receives from one peer on one tag, in posting order, and the worker that serves them.
class Channel {
 public:
  Channel(Group group, int rank, int peer, int tag) : group_(std::move(group)), rank_(rank), peer_(peer), tag_(tag) {}
  ~Channel();
  std::shared_ptr<PendingRecv> post(void* buf, std::size_t bytes);

 private:
  void serve();
  Group group_;
  int rank_, peer_, tag_;
  std::mutex mu_;
  std::deque<std::shared_ptr<PendingRecv>> queue_;
  std::thread worker_;
  bool running_ = false;
};

class RecvRequest final : public BlockingRequest {
 public:
  RecvRequest(std::shared_ptr<PendingRecv> pending, int rank, std::string what)
      : pending_(std::move(pending)), rank_(rank), what_(std::move(what)) {}
  ~RecvRequest() override { settle(); }

 private:
  void complete() override;
  std::shared_ptr<PendingRecv> pending_;
  int rank_;
  std::string what_;
};

// Every channel of one transport, created on first use.
class Channels {
 public:
  Channels(Group group, int rank) : group_(std::move(group)), rank_(rank) {}
  Channel& at(int peer, int tag);

 private:
  Group group_;
  int rank_;
  std::mutex mu_;
  std::map<std::pair<int, int>, std::unique_ptr<Channel>> channels_;
};

}  // namespace dynatrain::comm::c10d_detail
