#include "comm/mpi/mpi_runs.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <utility>

#include "comm/mpi/cma_copy.h"
#include "comm/mpi/mpi_error.h"
#include "common/error.h"

namespace dynatrain::comm {

namespace mpi_detail {
namespace {

int descriptor_tag(int tag) { return 4 * tag; }   // sender -> receiver: the sender's runs
int answer_tag(int tag) { return 4 * tag + 1; }   // receiver -> sender: 0 read, 1 mismatch, 2 write
int written_tag(int tag) { return 4 * tag + 2; }  // sender -> receiver: 0 written, 1 failed
int target_tag(int tag) { return 4 * tag + 3; }   // receiver -> sender: the receiver's runs

enum Answer : unsigned char { kRead = 0, kMismatch = 1, kWrite = 2 };

// Receives a descriptor taken by MPI_Improbe into a vector; checks its form.
std::vector<std::uint64_t> receive_descriptor(MPI_Message& msg, const MPI_Status& status, const std::string& where) {
  int bytes = 0;
  DT_MPI(MPI_Get_count(&status, MPI_BYTE, &bytes), where, ": MPI_Get_count");
  std::vector<std::uint64_t> desc(static_cast<std::size_t>(bytes) / sizeof(std::uint64_t));
  DT_MPI(MPI_Mrecv(desc.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE), where, ": MPI_Mrecv");
  DT_CHECK(descriptor_well_formed(desc), where, ": malformed runs descriptor");
  return desc;
}

class CmaRecv;
class CmaSend;

}  // namespace
}  // namespace mpi_detail

namespace detail {
// Every posted runs request of one transport, in posting order. Any runs wait (send or receive)
// progresses them all, as MPI progresses every posted request in any wait: a request then
// completes without its peer waiting on that very request, so the engine's schedule (which
// relies on MPI's progress rule) cannot form a cycle of waits. Per (peer, tag) only the oldest
// pending request of each kind advances (messages of a pair and tag match in order).
struct RunsProgress {
  std::mutex mu;
  std::vector<mpi_detail::CmaRecv*> receives;
  std::vector<mpi_detail::CmaSend*> sends;
  // Advances every request that can; caller holds mu.
  void poll_locked();
  void poll() {
    std::lock_guard lock(mu);
    poll_locked();
  }
};
}  // namespace detail

namespace mpi_detail {
namespace {

using detail::RunsProgress;

// Shared by both kinds of runs request: done / error state, waiting, and deregistration.
class RunsRequest : public Request {
 public:
  RunsRequest(std::shared_ptr<RunsProgress> progress, int peer, int tag, std::string where)
      : progress_(std::move(progress)), peer_(peer), tag_(tag), where_(std::move(where)) {}
  // Polls; after a few yields it sleeps between polls, 20 us doubling up to 200 us: on a machine
  // with fewer cores than processes a rank that only waits (a sender whose receiver reads, the
  // usual case) would otherwise take turns on the core of the rank that copies.
  void wait() override {
    constexpr long kFirstNapNs = 20'000, kLongestNapNs = 200'000;
    long nap_ns = kFirstNapNs;
    for (int polls = 0; !test(); ++polls) {
      if (polls < 4) {
        sched_yield();
        continue;
      }
      const timespec nap{0, nap_ns};
      nanosleep(&nap, nullptr);
      nap_ns = std::min(2 * nap_ns, kLongestNapNs);
    }
  }
  bool test() override {
    bool finished = false;
    {
      std::lock_guard lock(progress_->mu);
      if (!done_) progress_->poll_locked();
      finished = done_;
    }
    if (!finished) return false;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }
  int peer() const { return peer_; }
  int tag() const { return tag_; }
  bool done() const { return done_; }
  // One step of this request's protocol if its messages arrived; caller holds the progress
  // mutex. Errors end the request and are rethrown by its own test().
  void advance() {
    try {
      step();
    } catch (...) {
      done_ = true;
      error_ = std::current_exception();
    }
  }

 protected:
  virtual void step() = 0;
  // In destructors: a request never waited for would leave its peer waiting.
  void finish_quietly() {
    if (mpi_finalized()) return;
    try {
      wait();
    } catch (...) {
    }
  }
  std::shared_ptr<RunsProgress> progress_;
  int peer_, tag_;
  std::string where_;
  bool done_ = false;
  std::exception_ptr error_;
};

class CmaSend final : public RunsRequest {
 public:
  CmaSend(const void* base, const std::vector<ByteRun>& runs, int peer, int tag, MPI_Comm comm,
          std::shared_ptr<RunsProgress> progress, std::string where)
      : RunsRequest(std::move(progress), peer, tag, std::move(where)),
        base_(static_cast<std::byte*>(const_cast<void*>(base))),
        runs_(runs),
        comm_(comm),
        desc_(runs_descriptor(base, runs)) {
    DT_MPI(MPI_Irecv(&answer_, 1, MPI_BYTE, peer, answer_tag(tag), comm, &reqs_[1]), where_, ": MPI_Irecv (answer)");
    const int rc = MPI_Isend(desc_.data(), static_cast<int>(desc_.size() * sizeof(std::uint64_t)), MPI_BYTE, peer,
                             descriptor_tag(tag), comm, &reqs_[0]);
    if (rc != MPI_SUCCESS) {
      MPI_Cancel(&reqs_[1]);
      MPI_Request_free(&reqs_[1]);
      throw_mpi(rc, concat(where_, ": MPI_Isend (descriptor)"));
    }
    std::lock_guard lock(progress_->mu);
    progress_->sends.push_back(this);
  }
  ~CmaSend() override {
    finish_quietly();
    std::lock_guard lock(progress_->mu);
    auto& v = progress_->sends;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }

 private:
  void step() override {
    if (!answered_) {
      int flag = 0;
      const int rc = MPI_Testall(2, reqs_, &flag, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) throw_mpi(rc, concat(where_, " (wait)"));
      if (!flag) return;
      answered_ = true;
      if (answer_ == kMismatch)
        throw CommError(concat("mpi: ", where_, ": message size mismatch (the receiver's runs total another size)"));
      if (answer_ == kRead) {
        done_ = true;
        return;
      }
    }
    // Answer kWrite: the receiver's runs follow; write ours into them and report.
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    DT_MPI(MPI_Improbe(peer_, target_tag(tag_), comm_, &flag, &msg, &status), where_, ": MPI_Improbe (target)");
    if (!flag) return;
    done_ = true;
    const std::vector<std::uint64_t> target = receive_descriptor(msg, status, where_);
    unsigned char written = 1;
    std::exception_ptr error;  // kept as thrown: a PeerLostError must reach the CLI as one
    try {
      DT_CHECK_EQ(descriptor_bytes(target), runs_bytes(runs_));
      copy_remote_runs(Copy::kWrite, target, base_, runs_, where_);
      written = 0;
    } catch (...) {
      error = std::current_exception();
    }
    DT_MPI(MPI_Send(&written, 1, MPI_BYTE, peer_, written_tag(tag_), comm_), where_, ": MPI_Send (written)");
    if (error) std::rethrow_exception(error);
  }

  std::byte* base_;  // written through process_vm_writev's local side only: never modified
  std::vector<ByteRun> runs_;
  MPI_Comm comm_;
  std::vector<std::uint64_t> desc_;
  unsigned char answer_ = 0;
  bool answered_ = false;
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

class CmaRecv final : public RunsRequest {
 public:
  CmaRecv(void* base, std::vector<ByteRun> runs, int peer, int tag, MPI_Comm comm,
          std::shared_ptr<RunsProgress> progress, std::string where)
      : RunsRequest(std::move(progress), peer, tag, std::move(where)),
        base_(static_cast<std::byte*>(base)),
        runs_(std::move(runs)),
        comm_(comm) {
    std::lock_guard lock(progress_->mu);
    progress_->receives.push_back(this);
  }
  ~CmaRecv() override {
    finish_quietly();
    if (!mpi_finalized() && target_req_ != MPI_REQUEST_NULL) MPI_Wait(&target_req_, MPI_STATUS_IGNORE);
    std::lock_guard lock(progress_->mu);
    auto& v = progress_->receives;
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  // Whether this receive has taken its descriptor (later ones of its peer and tag may then
  // take theirs).
  bool matched() const { return matched_; }

 private:
  void step() override {
    if (matched_) return await_written();
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    DT_MPI(MPI_Improbe(peer_, descriptor_tag(tag_), comm_, &flag, &msg, &status), where_, ": MPI_Improbe");
    if (!flag) return;
    matched_ = true;
    const std::vector<std::uint64_t> desc = receive_descriptor(msg, status, where_);
    const std::uint64_t remote_bytes = descriptor_bytes(desc);
    if (remote_bytes != runs_bytes(runs_)) {
      done_ = true;
      answer(kMismatch);
      throw CommError(concat("mpi: ", where_, ": message size mismatch: the sender's runs total ", remote_bytes,
                             " bytes, expected ", runs_bytes(runs_)));
    }
    if (sender_should_write(desc, runs_)) {
      answer(kWrite);
      target_ = runs_descriptor(base_, runs_);
      DT_MPI(MPI_Irecv(&written_, 1, MPI_BYTE, peer_, written_tag(tag_), comm_, &written_req_), where_,
             ": MPI_Irecv (written)");
      DT_MPI(MPI_Isend(target_.data(), static_cast<int>(target_.size() * sizeof(std::uint64_t)), MPI_BYTE, peer_,
                       target_tag(tag_), comm_, &target_req_),
             where_, ": MPI_Isend (target)");
      return await_written();
    }
    done_ = true;
    std::exception_ptr error;  // kept as thrown: a PeerLostError must reach the CLI as one
    try {
      copy_remote_runs(Copy::kRead, desc, base_, runs_, where_);
    } catch (const CommError&) {
      error = std::current_exception();
    }
    answer(error ? kMismatch : kRead);
    if (error) std::rethrow_exception(error);
  }
  void answer(unsigned char a) {
    DT_MPI(MPI_Send(&a, 1, MPI_BYTE, peer_, answer_tag(tag_), comm_), where_, ": MPI_Send (answer)");
  }
  void await_written() {
    int flag = 0;
    const int rc = MPI_Test(&written_req_, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) throw_mpi(rc, concat(where_, ": MPI_Test (written)"));
    if (!flag) return;
    done_ = true;
    DT_MPI(MPI_Wait(&target_req_, MPI_STATUS_IGNORE), where_, ": MPI_Wait (target)");
    if (written_ != 0) throw CommError(concat("mpi: ", where_, ": the sender could not write into this rank's runs"));
  }

  std::byte* base_;
  std::vector<ByteRun> runs_;
  MPI_Comm comm_;
  bool matched_ = false;
  std::vector<std::uint64_t> target_;  // this rank's runs, for the sender to write into
  unsigned char written_ = 1;
  MPI_Request written_req_ = MPI_REQUEST_NULL, target_req_ = MPI_REQUEST_NULL;
};

}  // namespace

}  // namespace mpi_detail

void detail::RunsProgress::poll_locked() {
  // Receives: the oldest not yet matched one per (peer, tag) may take the next descriptor;
  // matched ones wait for their sender's write.
  std::vector<std::pair<int, int>> tried;
  for (std::size_t i = 0; i < receives.size(); ++i) {
    mpi_detail::CmaRecv* r = receives[i];
    if (r->done()) continue;
    if (r->matched()) {
      r->advance();
      continue;
    }
    const std::pair<int, int> key{r->peer(), r->tag()};
    if (std::find(tried.begin(), tried.end(), key) != tried.end()) continue;
    r->advance();
    if (!r->matched()) tried.push_back(key);  // still waiting: later ones of the key wait too
  }
  // Sends: the oldest pending one per (peer, tag) (answers and targets arrive in order).
  tried.clear();
  for (mpi_detail::CmaSend* s : sends) {
    if (s->done()) continue;
    const std::pair<int, int> key{s->peer(), s->tag()};
    if (std::find(tried.begin(), tried.end(), key) != tried.end()) continue;
    tried.push_back(key);
    s->advance();
  }
}

namespace mpi_detail {

std::shared_ptr<detail::RunsProgress> make_runs_progress() { return std::make_shared<detail::RunsProgress>(); }

std::unique_ptr<Request> post_runs_send(const void* base, const std::vector<ByteRun>& runs, int peer, int tag,
                                        MPI_Comm comm, std::shared_ptr<detail::RunsProgress> progress,
                                        std::string where) {
  return std::make_unique<CmaSend>(base, runs, peer, tag, comm, std::move(progress), std::move(where));
}

std::unique_ptr<Request> post_runs_recv(void* base, std::vector<ByteRun> runs, int peer, int tag, MPI_Comm comm,
                                        std::shared_ptr<detail::RunsProgress> progress, std::string where) {
  return std::make_unique<CmaRecv>(base, std::move(runs), peer, tag, comm, std::move(progress), std::move(where));
}

}  // namespace mpi_detail
}  // namespace dynatrain::comm
