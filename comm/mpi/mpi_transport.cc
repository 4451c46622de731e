#include "comm/mpi/mpi_transport.h"

#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace dynatrain::comm {

namespace {

using ::dynatrain::detail::concat;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(len));
}

[[noreturn]] void throw_mpi(int code, const std::string& what) {
  throw CommError(
      concat("mpi: ", what, " failed: ", mpi_error_string(code), " (MPI error ", code, ")"));
}

// Calls an MPI function; on failure throws CommError naming the operation. The context parts are
// only formatted on failure.
#define DT_MPI(call, ...)                                                      \
  do {                                                                         \
    const int dt_mpi_rc_ = (call);                                             \
    if (dt_mpi_rc_ != MPI_SUCCESS) throw_mpi(dt_mpi_rc_, concat(__VA_ARGS__)); \
  } while (0)

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// How `bytes` bytes are described to MPI: `count` elements of `type`. Small messages are plain
// MPI_BYTE; larger ones one element of a derived type, n contiguous blocks of `chunk` bytes plus
// a remainder. The type signature is `bytes` x MPI_BYTE either way, so the two sides may chunk
// differently and still match.
class ByteType {
 public:
  ByteType(std::size_t bytes, std::size_t max_chunk, const std::string& where) {
    if (bytes <= max_chunk) {
      count_ = static_cast<int>(bytes);
      return;
    }
    // Keep the block count an int too, whatever the chunk setting.
    const std::size_t chunk = std::max(max_chunk, (bytes + INT_MAX - 1) / INT_MAX);
    const std::size_t blocks = bytes / chunk;
    const std::size_t rest = bytes % chunk;
    MPI_Datatype block = MPI_DATATYPE_NULL;
    MPI_Datatype body = MPI_DATATYPE_NULL;
    DT_MPI(MPI_Type_contiguous(static_cast<int>(chunk), MPI_BYTE, &block), where,
           ": MPI_Type_contiguous(", chunk, " bytes)");
    const int rc_body = MPI_Type_contiguous(static_cast<int>(blocks), block, &body);
    MPI_Type_free(&block);
    if (rc_body != MPI_SUCCESS)
      throw_mpi(rc_body, concat(where, ": MPI_Type_contiguous(", blocks, " blocks)"));
    if (rest == 0) {
      type_ = body;
    } else {
      int lengths[2] = {1, static_cast<int>(rest)};
      MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(blocks * chunk)};
      MPI_Datatype types[2] = {body, MPI_BYTE};
      const int rc = MPI_Type_create_struct(2, lengths, displacements, types, &type_);
      MPI_Type_free(&body);
      if (rc != MPI_SUCCESS) throw_mpi(rc, concat(where, ": MPI_Type_create_struct"));
    }
    const int rc = MPI_Type_commit(&type_);
    if (rc != MPI_SUCCESS) {
      MPI_Type_free(&type_);
      throw_mpi(rc, concat(where, ": MPI_Type_commit"));
    }
    count_ = 1;
    derived_ = true;
  }
  ~ByteType() { release(); }
  ByteType(ByteType&& other) noexcept
      : type_(std::exchange(other.type_, MPI_BYTE)),
        count_(other.count_),
        derived_(std::exchange(other.derived_, false)) {}
  ByteType& operator=(ByteType&&) = delete;

  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }
  void release() {
    if (derived_ && !mpi_finalized()) MPI_Type_free(&type_);
    derived_ = false;
    type_ = MPI_BYTE;
  }

 private:
  MPI_Datatype type_ = MPI_BYTE;
  int count_ = 0;
  bool derived_ = false;
};

// Bytes a completed receive delivered, checked against what the caller asked for.
void check_received(const MPI_Status& status, const ByteType& type, std::size_t expected,
                    const std::string& where) {
  MPI_Count got = 0;
  DT_MPI(MPI_Get_elements_x(&status, type.type(), &got), where, ": MPI_Get_elements_x");
  if (got == MPI_UNDEFINED || static_cast<std::size_t>(got) != expected) {
    throw CommError(concat("mpi: ", where, ": message size mismatch: received ", got,
                           " bytes, expected ", expected));
  }
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, ByteType type, bool is_recv, std::size_t bytes, std::string where)
      : request_(request),
        type_(std::move(type)),
        is_recv_(is_recv),
        bytes_(bytes),
        where_(std::move(where)) {}

  ~MpiRequest() override {
    if (!done_ && !mpi_finalized()) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  void wait() override {
    if (done_) return;
    MPI_Status status;
    const int rc = MPI_Wait(&request_, &status);
    finish(rc, status);
  }

  bool test() override {
    if (done_) return true;
    MPI_Status status;
    int flag = 0;
    const int rc = MPI_Test(&request_, &flag, &status);
    if (rc != MPI_SUCCESS || flag) finish(rc, status);  // throws if the operation failed
    return flag != 0;
  }

 private:
  void finish(int rc, const MPI_Status& status) {
    done_ = true;
    request_ = MPI_REQUEST_NULL;
    if (rc != MPI_SUCCESS) {
      type_.release();
      throw_mpi(rc, concat(where_, " (wait)"));
    }
    if (is_recv_) {
      try {
        check_received(status, type_, bytes_, where_);
      } catch (...) {
        type_.release();
        throw;
      }
    }
    type_.release();
  }

  MPI_Request request_;
  ByteType type_;
  bool is_recv_;
  std::size_t bytes_;
  std::string where_;
  bool done_ = false;
};

void check_peer(int peer, int size, const char* what) {
  DT_CHECK(peer >= 0 && peer < size, what, " rank ", peer, " is outside [0, ", size, ")");
}

void check_tag(int tag) {
  DT_CHECK(tag >= 0 && tag <= kMaxTag, "tag ", tag, " is outside [0, ", kMaxTag, "]");
}

// ---- scattered messages between processes of one node (cross-memory attach) ----
// Protocol of one runs message on the transport's private runs communicator, for a pair with
// runs_direct(). The kernel copies a stream between a local and a remote list of runs, pinning
// the remote pages run by run, so the copy is made by the side whose runs are the more scattered
// (they are its local list), reading or writing the other's:
//   1. the sender posts a descriptor (its pid, then (address, length) of each run) on 4*tag;
//   2. the receiver, inside a wait, takes it and either reads the runs straight out of the
//      sender's memory into its own (process_vm_readv) and answers 0 on 4*tag+1, or, when the
//      sender's runs are far more scattered than its own (kWriteRatio), answers 2 and posts its
//      own descriptor on 4*tag+3 (answer 1: the sizes differ);
//   3. after answer 2 the sender, inside a wait, writes its runs into the receiver's
//      (process_vm_writev) and reports 0 on 4*tag+2 (1: it failed), which completes the receive.
// The sender's runs stay untouched until its request completes. Any runs wait progresses every
// posted runs request of the transport, oldest first per (peer, tag) (RunsProgress).
constexpr std::size_t kIovBatch = 1024;  // IOV_MAX on Linux
// The receiver asks the sender to write when the sender's runs, adjacent ones merged, are more
// than this many times its own (and at least kWriteMinRuns).
constexpr std::size_t kWriteRatio = 2, kWriteMinRuns = 64;

int descriptor_tag(int tag) { return 4 * tag; }  // sender -> receiver: the sender's runs
int answer_tag(int tag) { return 4 * tag + 1; }   // receiver -> sender: 0 read, 1 mismatch, 2 write
int written_tag(int tag) { return 4 * tag + 2; }  // sender -> receiver: 0 written, 1 failed
int target_tag(int tag) { return 4 * tag + 3; }   // receiver -> sender: the receiver's runs
constexpr int kMaxProtocolTag = 4 * kMaxTag + 3;

enum Answer : unsigned char { kRead = 0, kMismatch = 1, kWrite = 2 };

// (pid, n, (address, length) x n) of runs at `base`.
std::vector<std::uint64_t> runs_descriptor(const void* base, const std::vector<ByteRun>& runs) {
  std::vector<std::uint64_t> desc;
  desc.reserve(2 + 2 * runs.size());
  desc.push_back(static_cast<std::uint64_t>(getpid()));
  desc.push_back(runs.size());
  for (const ByteRun& r : runs) {
    desc.push_back(reinterpret_cast<std::uintptr_t>(static_cast<const std::byte*>(base) + r.offset));
    desc.push_back(r.bytes);
  }
  return desc;
}

std::uint64_t descriptor_bytes(const std::vector<std::uint64_t>& desc) {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < desc[1]; ++i) bytes += desc[3 + 2 * i];
  return bytes;
}

// Runs after merging the ones that continue each other (what the kernel pins): run(i) gives
// the (start, length) of run i of `count`.
template <typename Run>
std::size_t merged_run_count(std::size_t count, Run run) {
  std::size_t n = 0;
  std::uint64_t end = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto [start, len] = run(i);
    if (len == 0) continue;
    if (n == 0 || start != end) ++n;
    end = start + len;
  }
  return n;
}

// Receives a descriptor taken by MPI_Improbe into a vector; checks its form.
std::vector<std::uint64_t> receive_descriptor(MPI_Message& msg, const MPI_Status& status, const std::string& where) {
  int bytes = 0;
  DT_MPI(MPI_Get_count(&status, MPI_BYTE, &bytes), where, ": MPI_Get_count");
  std::vector<std::uint64_t> desc(static_cast<std::size_t>(bytes) / sizeof(std::uint64_t));
  DT_MPI(MPI_Mrecv(desc.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE), where, ": MPI_Mrecv");
  DT_CHECK(desc.size() >= 2 && desc.size() == 2 + 2 * desc[1], where, ": malformed runs descriptor");
  return desc;
}

// Copies between the runs of descriptor `desc` (another process's) and the local runs, in
// stream order: reads them into the local runs, or writes the local runs into them. One call
// moves a stream: its remote iovecs, in order, to or from its local iovecs, in order, each side
// with its own list. So each side's list is built alone, a piece that continues the side's last
// iovec extending it: a TP slice that is one run at one side and a run per row at the other costs
// one iovec per call on the first side. A call ends when either list is full (IOV_MAX) or at
// kMaxCallBytes (Linux moves at most MAX_RW_COUNT, about 2 GiB, in one call).
enum class Copy { kRead, kWrite };
void copy_remote_runs(Copy direction, const std::vector<std::uint64_t>& desc, std::byte* base,
                      const std::vector<ByteRun>& runs, const std::string& where) {
  constexpr std::size_t kMaxCallBytes = std::size_t{1} << 30;
  const auto pid = static_cast<pid_t>(desc[0]);
  const std::size_t n_remote = desc[1];
  std::vector<iovec> local, remote;
  local.reserve(kIovBatch), remote.reserve(kIovBatch);
  std::size_t batch_bytes = 0;
  auto flush = [&] {
    if (local.empty()) return;
    const ssize_t got = direction == Copy::kRead
                            ? process_vm_readv(pid, local.data(), local.size(), remote.data(), remote.size(), 0)
                            : process_vm_writev(pid, local.data(), local.size(), remote.data(), remote.size(), 0);
    const char* call = direction == Copy::kRead ? "process_vm_readv" : "process_vm_writev";
    if (got < 0 && errno == ESRCH)  // the peer's process (or its memory) is gone: it was killed
      throw PeerLostError(pid, concat("mpi: ", where, ": pid ", pid, " ended during a direct ",
                                      direction == Copy::kRead ? "read" : "write"));
    if (got != static_cast<ssize_t>(batch_bytes))
      throw CommError(concat("mpi: ", where, ": ", call, " of ", batch_bytes, " bytes with pid ", pid, " returned ",
                             got, got < 0 ? concat(" (", std::strerror(errno), ")") : std::string()));
    local.clear(), remote.clear();
    batch_bytes = 0;
  };
  auto continues = [](const std::vector<iovec>& v, const void* at) {
    return !v.empty() && static_cast<const std::byte*>(v.back().iov_base) + v.back().iov_len == at;
  };
  std::size_t i = 0, j = 0, at_i = 0, at_j = 0;  // remote run, local run, bytes done in each
  while (i < n_remote && j < runs.size()) {
    const std::uint64_t r_addr = desc[2 + 2 * i], r_len = desc[3 + 2 * i];
    std::size_t n = std::min<std::size_t>(r_len - at_i, runs[j].bytes - at_j);
    n = std::min(n, kMaxCallBytes - batch_bytes);
    if (n > 0) {
      std::byte* here = base + runs[j].offset + at_j;
      auto* there = reinterpret_cast<std::byte*>(r_addr + at_i);
      bool extend_local = continues(local, here), extend_remote = continues(remote, there);
      if ((!extend_local && local.size() == kIovBatch) || (!extend_remote && remote.size() == kIovBatch)) {
        flush();
        extend_local = extend_remote = false;
      }
      if (extend_local) local.back().iov_len += n;
      else local.push_back({here, n});
      if (extend_remote) remote.back().iov_len += n;
      else remote.push_back({there, n});
      batch_bytes += n;
    }
    if (batch_bytes == kMaxCallBytes) flush();
    at_i += n, at_j += n;
    if (at_i == r_len) ++i, at_i = 0;
    if (at_j == runs[j].bytes) ++j, at_j = 0;
  }
  flush();
}

class CmaRecv;
class CmaSend;

}  // namespace

namespace detail {
// Every posted runs request of one transport, in posting order. Any runs wait (send or receive)
// progresses them all, as MPI progresses every posted request in any wait: a request then
// completes without its peer waiting on that very request, so the engine's schedule (which
// relies on MPI's progress rule) cannot form a cycle of waits. Per (peer, tag) only the oldest
// pending request of each kind advances (messages of a pair and tag match in order).
struct RunsProgress {
  std::mutex mu;
  std::vector<CmaRecv*> receives;
  std::vector<CmaSend*> sends;
  // Advances every request that can; caller holds mu.
  void poll_locked();
  void poll() {
    std::lock_guard lock(mu);
    poll_locked();
  }
};
}  // namespace detail

namespace {

using detail::RunsProgress;

// Shared by both kinds of runs request: done / error state, waiting, and deregistration.
class RunsRequest : public Request {
 public:
  RunsRequest(std::shared_ptr<RunsProgress> progress, int peer, int tag, std::string where)
      : progress_(std::move(progress)), peer_(peer), tag_(tag), where_(std::move(where)) {}
  void wait() override {
    while (!test()) sched_yield();
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
        base_(static_cast<std::byte*>(const_cast<void*>(base))), runs_(runs), comm_(comm),
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
      : RunsRequest(std::move(progress), peer, tag, std::move(where)), base_(static_cast<std::byte*>(base)),
        runs_(std::move(runs)), comm_(comm) {
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
    if (sender_should_write(desc)) {
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
  bool sender_should_write(const std::vector<std::uint64_t>& desc) const {
    const std::size_t theirs = merged_run_count(desc[1], [&](std::size_t i) {
      return std::pair<std::uint64_t, std::uint64_t>{desc[2 + 2 * i], desc[3 + 2 * i]};
    });
    const std::size_t ours = merged_run_count(runs_.size(), [&](std::size_t i) {
      return std::pair<std::uint64_t, std::uint64_t>{runs_[i].offset, runs_[i].bytes};
    });
    return theirs >= kWriteMinRuns && theirs > kWriteRatio * ours;
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

void detail::RunsProgress::poll_locked() {
  // Receives: the oldest not yet matched one per (peer, tag) may take the next descriptor;
  // matched ones wait for their sender's write.
  std::vector<std::pair<int, int>> tried;
  for (std::size_t i = 0; i < receives.size(); ++i) {
    CmaRecv* r = receives[i];
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
  for (CmaSend* s : sends) {
    if (s->done()) continue;
    const std::pair<int, int> key{s->peer(), s->tag()};
    if (std::find(tried.begin(), tried.end(), key) != tried.end()) continue;
    tried.push_back(key);
    s->advance();
  }
}

namespace {

// Read by peers' probes: cross-memory attach works between two processes when one can read this.
constexpr std::uint64_t kCmaMagic = 0x44796e615472a1cbull;
volatile std::uint64_t cma_probe_word = kCmaMagic;

std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MpiSession

bool MpiSession::init(int* argc, char*** argv) {
  std::lock_guard lock(init_mutex());
  if (mpi_finalized()) throw CommError("mpi: MPI_Init_thread: MPI was already finalised");
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool did_init = false;
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) throw_mpi(rc, "MPI_Init_thread(MPI_THREAD_MULTIPLE)");
    did_init = true;
  } else {
    DT_MPI(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  DT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
         "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  DT_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN),
         "MPI_Comm_set_errhandler(MPI_COMM_SELF)");
  if (provided < MPI_THREAD_MULTIPLE) {
    throw CommError(concat("mpi: the MPI library provides thread level ", provided,
                           " but DynaTrain needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                           "); use an MPI build with thread support"));
  }
  return did_init;
}

MpiSession::MpiSession(int* argc, char*** argv) : owner_(init(argc, argv)) {}

MpiSession::~MpiSession() {
  std::lock_guard lock(init_mutex());
  if (owner_ && !mpi_finalized()) MPI_Finalize();
}

// ---------------------------------------------------------------------------------------------
// MpiTransport

MpiTransport::MpiTransport(MPI_Comm comm, std::size_t max_chunk_bytes)
    : comm_(comm), max_chunk_(max_chunk_bytes) {
  try {
    DT_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    DT_MPI(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    DT_MPI(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    DT_MPI(MPI_Comm_dup(comm_, &coll_comm_), "rank ", rank_, ": MPI_Comm_dup (collectives)");
    DT_MPI(MPI_Comm_set_errhandler(coll_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    DT_MPI(MPI_Comm_dup(comm_, &runs_comm_), "rank ", rank_, ": MPI_Comm_dup (runs)");
    runs_progress_ = std::make_shared<detail::RunsProgress>();
    DT_MPI(MPI_Comm_set_errhandler(runs_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    probe_runs_direct();
  } catch (...) {
    if (runs_comm_ != MPI_COMM_NULL) MPI_Comm_free(&runs_comm_);
    if (coll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&coll_comm_);
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiTransport::~MpiTransport() {
  if (mpi_finalized()) return;
  if (runs_comm_ != MPI_COMM_NULL) MPI_Comm_free(&runs_comm_);
  if (coll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&coll_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Collective: runs go direct to the peers on this node (as Open MPI sees nodes:
// MPI_COMM_TYPE_SHARED, so ranks that an emulated cluster places on other hosts are not) when
// every rank could read every same-node peer's probe word with process_vm_readv, and the tags of
// the protocol fit MPI_TAG_UB; else every pair uses the packing default. It also records every
// rank's node (node_of: the lowest rank of its node). One split_type, one
// all-gather, one all-reduce.
void MpiTransport::probe_runs_direct() {
  struct Id {
    std::uint64_t pid = 0, word = 0, node = 0;
  };
  // This node's ranks, as ranks of this communicator.
  MPI_Comm node = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_split_type(coll_comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "rank ", rank_,
         ": MPI_Comm_split_type (runs probe)");
  MPI_Group node_group = MPI_GROUP_NULL, all_group = MPI_GROUP_NULL;
  int n = 0;
  MPI_Comm_group(node, &node_group);
  MPI_Comm_group(coll_comm_, &all_group);
  MPI_Group_size(node_group, &n);
  std::vector<int> local(static_cast<std::size_t>(n)), mine(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(node_group, n, local.data(), all_group, mine.data());
  MPI_Group_free(&node_group);
  MPI_Group_free(&all_group);
  MPI_Comm_free(&node);
  const Id me{static_cast<std::uint64_t>(getpid()), reinterpret_cast<std::uintptr_t>(&cma_probe_word),
              static_cast<std::uint64_t>(*std::min_element(mine.begin(), mine.end()))};
  std::vector<Id> all(static_cast<std::size_t>(size_));
  DT_MPI(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, coll_comm_), "rank ", rank_,
         ": MPI_Allgather (runs probe)");
  node_of_.clear();
  for (const Id& id : all) node_of_.push_back(static_cast<int>(id.node));
  // MPI_TAG_UB is a predefined attribute of MPI_COMM_WORLD only: Open MPI attaches it to a
  // duplicate (attributes are copied) but not to a split or merged communicator, where the
  // bound is the same (MPI 4.0, 7.1.2: the value is constant over the job).
  void* ub = nullptr;
  int has_ub = 0;
  DT_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub), "MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB)");
  int ok = has_ub && *static_cast<int*>(ub) >= kMaxProtocolTag;
  runs_direct_.assign(all.size(), 0);
  for (int r : mine) {
    if (!ok || r < 0 || r >= size_) continue;
    const Id& peer = all[static_cast<std::size_t>(r)];
    std::uint64_t word = 0;
    iovec into{&word, sizeof word}, from{reinterpret_cast<void*>(peer.word), sizeof word};
    ok = process_vm_readv(static_cast<pid_t>(peer.pid), &into, 1, &from, 1, 0) ==
             static_cast<ssize_t>(sizeof word) && word == kCmaMagic;
    runs_direct_[static_cast<std::size_t>(r)] = 1;
  }
  // Only when every rank of the communicator is on this node: then every pair of an engine
  // switch uses the runs protocol and every wait progresses the posted runs receives (a plain
  // MPI_Wait on an off-node message would not, and could close a cycle of waits).
  ok = ok && n == size_;
  int all_ok = 0;
  DT_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, coll_comm_), "rank ", rank_, ": MPI_Allreduce (runs probe)");
  if (!all_ok) runs_direct_.assign(all.size(), 0);
}

int MpiTransport::node_of(int rank) const {
  DT_CHECK(rank >= 0 && rank < size_, "node_of: rank ", rank, " of ", size_);
  return node_of_[static_cast<std::size_t>(rank)];
}

bool MpiTransport::runs_direct(int peer) const {
  return peer >= 0 && peer < size_ && runs_direct_[static_cast<std::size_t>(peer)] != 0;
}

std::unique_ptr<Request> MpiTransport::isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag) {
  check_peer(peer, size_, "isend_runs: destination");
  check_tag(tag);
  if (!runs_direct(peer)) return Transport::isend_runs(base, std::move(runs), peer, tag);
  return std::make_unique<CmaSend>(base, runs, peer, tag, runs_comm_, runs_progress_,
                                   concat("rank ", rank_, "/", size_, ": isend_runs to ", peer, " (tag ", tag, ", ",
                                          runs.size(), " runs, ", runs_bytes(runs), " bytes)"));
}

std::unique_ptr<Request> MpiTransport::irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag) {
  check_peer(peer, size_, "irecv_runs: source");
  check_tag(tag);
  if (!runs_direct(peer)) return Transport::irecv_runs(base, std::move(runs), peer, tag);
  std::string where = concat("rank ", rank_, "/", size_, ": irecv_runs from ", peer, " (tag ", tag, ", ",
                             runs.size(), " runs, ", runs_bytes(runs), " bytes)");
  return std::make_unique<CmaRecv>(base, std::move(runs), peer, tag, runs_comm_, runs_progress_, std::move(where));
}

std::unique_ptr<MpiTransport> MpiTransport::world() { return from_comm(MPI_COMM_WORLD); }

std::unique_ptr<MpiTransport> MpiTransport::from_comm(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || mpi_finalized()) {
    throw CommError("mpi: MPI is not initialised; construct an MpiSession first");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::unique_ptr<MpiTransport>(new MpiTransport(dup, kDefaultMaxChunkBytes));
}

void MpiTransport::set_max_chunk_bytes(std::size_t bytes) {
  DT_CHECK(bytes >= 1 && bytes <= static_cast<std::size_t>(INT_MAX),
           "max chunk must be in [1, INT_MAX], got ", bytes);
  max_chunk_.store(bytes, std::memory_order_relaxed);
}

std::unique_ptr<Request> MpiTransport::post(bool is_send, void* buf, std::size_t bytes, int peer,
                                            int tag, MPI_Comm comm, const char* what) {
  std::string where = concat("rank ", rank_, "/", size_, ": ", what, is_send ? " to " : " from ",
                             peer, " (tag ", tag, ", ", bytes, " bytes)");
  ByteType type(bytes, max_chunk_bytes(), where);
  MPI_Request request = MPI_REQUEST_NULL;
  if (is_send) {
    DT_MPI(MPI_Isend(buf, type.count(), type.type(), peer, tag, comm, &request), where,
           ": MPI_Isend");
  } else {
    DT_MPI(MPI_Irecv(buf, type.count(), type.type(), peer, tag, comm, &request), where,
           ": MPI_Irecv");
  }
  return std::make_unique<MpiRequest>(request, std::move(type), !is_send, bytes, std::move(where));
}

std::unique_ptr<Request> MpiTransport::isend(const void* buf, std::size_t bytes, int peer,
                                             int tag) {
  check_peer(peer, size_, "isend: destination");
  check_tag(tag);
  return post(true, const_cast<void*>(buf), bytes, peer, tag, comm_, "isend");
}

std::unique_ptr<Request> MpiTransport::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, size_, "irecv: source");
  check_tag(tag);
  return post(false, buf, bytes, peer, tag, comm_, "irecv");
}

void MpiTransport::sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf,
                            std::size_t recv_bytes, int src, int tag) {
  check_peer(dst, size_, "sendrecv: destination");
  check_peer(src, size_, "sendrecv: source");
  check_tag(tag);
  const std::string where =
      concat("rank ", rank_, "/", size_, ": sendrecv (", send_bytes, " bytes to ", dst, ", ",
             recv_bytes, " bytes from ", src, ", tag ", tag, ")");
  const ByteType send_type(send_bytes, max_chunk_bytes(), where);
  const ByteType recv_type(recv_bytes, max_chunk_bytes(), where);
  MPI_Status status;
  DT_MPI(MPI_Sendrecv(send_buf, send_type.count(), send_type.type(), dst, tag, recv_buf,
                      recv_type.count(), recv_type.type(), src, tag, comm_, &status),
         where, ": MPI_Sendrecv");
  check_received(status, recv_type, recv_bytes, where);
}

// ---- collectives (on coll_comm_) ----

void MpiTransport::barrier() {
  DT_MPI(MPI_Barrier(coll_comm_), "rank ", rank_, "/", size_, ": MPI_Barrier");
}

void MpiTransport::broadcast(void* buf, std::size_t bytes, int root) {
  check_peer(root, size_, "broadcast: root");
  const std::size_t chunk = max_chunk_bytes();
  auto* p = static_cast<unsigned char*>(buf);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t n = std::min(chunk, bytes - off);
    DT_MPI(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, root, coll_comm_), "rank ", rank_, "/",
           size_, ": MPI_Bcast (", n, " bytes at offset ", off, " of ", bytes, ", root ", root,
           ")");
  }
}

void MpiTransport::all_reduce_sum(float* buf, std::size_t count) {
  const std::size_t chunk = std::max<std::size_t>(1, max_chunk_bytes() / sizeof(float));
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t n = std::min(chunk, count - off);
    DT_MPI(
        MPI_Allreduce(MPI_IN_PLACE, buf + off, static_cast<int>(n), MPI_FLOAT, MPI_SUM, coll_comm_),
        "rank ", rank_, "/", size_, ": MPI_Allreduce (", n, " floats at offset ", off, " of ",
        count, ")");
  }
}

void MpiTransport::all_gather(const float* send, float* recv, std::size_t count_per_rank) {
  all_gather_bytes(send, recv, count_per_rank * sizeof(float));
}

void MpiTransport::all_gather_bytes(const void* send_buf, void* recv_buf, std::size_t bytes_per_rank) {
  const auto* send = static_cast<const unsigned char*>(send_buf);
  auto* recv = static_cast<unsigned char*>(recv_buf);
  const std::size_t count = bytes_per_rank;
  const auto ranks = static_cast<std::size_t>(size_);
  const std::size_t chunk = max_chunk_bytes();
  if (count * ranks <= chunk) {
    DT_MPI(MPI_Allgather(send, static_cast<int>(count), MPI_BYTE, recv, static_cast<int>(count),
                         MPI_BYTE, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Allgather (", count, " bytes per rank)");
    return;
  }
  // Chunked: gather a slice of every rank's block into staging, then scatter it into place.
  const std::size_t step = std::max<std::size_t>(1, chunk / ranks);
  std::vector<unsigned char> staging(std::min(step, count) * ranks);
  for (std::size_t off = 0; off < count; off += step) {
    const std::size_t n = std::min(step, count - off);
    DT_MPI(MPI_Allgather(send + off, static_cast<int>(n), MPI_BYTE, staging.data(),
                         static_cast<int>(n), MPI_BYTE, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Allgather (", n, " bytes at offset ", off, " of ",
           count, " per rank)");
    for (std::size_t r = 0; r < ranks; ++r) std::memcpy(recv + r * count + off, staging.data() + r * n, n);
  }
}

void MpiTransport::reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) {
  const std::size_t count = count_per_rank;
  const auto ranks = static_cast<std::size_t>(size_);
  const std::size_t chunk = max_chunk_bytes();
  if (count * ranks * sizeof(float) <= chunk) {
    DT_MPI(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                    coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Reduce_scatter_block (", count, " floats per rank)");
    return;
  }
  // Chunked: pack the same slice of every rank's block side by side, reduce-scatter that.
  const std::size_t step = std::max<std::size_t>(1, chunk / (ranks * sizeof(float)));
  std::vector<float> staging(std::min(step, count) * ranks);
  for (std::size_t off = 0; off < count; off += step) {
    const std::size_t n = std::min(step, count - off);
    for (std::size_t r = 0; r < ranks; ++r) {
      std::memcpy(staging.data() + r * n, send + r * count + off, n * sizeof(float));
    }
    DT_MPI(MPI_Reduce_scatter_block(staging.data(), recv + off, static_cast<int>(n), MPI_FLOAT,
                                    MPI_SUM, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Reduce_scatter_block (", n, " floats at offset ", off,
           " of ", count, " per rank)");
  }
}

void MpiTransport::all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                              const std::vector<std::size_t>& send_offsets, void* recv,
                              const std::vector<std::size_t>& recv_counts,
                              const std::vector<std::size_t>& recv_offsets) {
  const auto n = static_cast<std::size_t>(size_);
  check_all_to_all_args(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  const std::size_t chunk = max_chunk_bytes();
  const auto fits = [&](const std::vector<std::size_t>& counts,
                        const std::vector<std::size_t>& offsets) {
    for (std::size_t r = 0; r < n; ++r) {
      if (counts[r] > chunk || offsets[r] > static_cast<std::size_t>(INT_MAX)) return false;
    }
    return true;
  };
  // The choice must be the same on every rank, so agree on it (one tiny allreduce).
  int small = fits(send_counts, send_offsets) && fits(recv_counts, recv_offsets) ? 1 : 0;
  DT_MPI(MPI_Allreduce(MPI_IN_PLACE, &small, 1, MPI_INT, MPI_MIN, coll_comm_), "rank ", rank_, "/",
         size_, ": MPI_Allreduce (all_to_all path choice)");
  if (small) {
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (std::size_t r = 0; r < n; ++r) {
      sc[r] = static_cast<int>(send_counts[r]);
      sd[r] = static_cast<int>(send_offsets[r]);
      rc[r] = static_cast<int>(recv_counts[r]);
      rd[r] = static_cast<int>(recv_offsets[r]);
    }
    DT_MPI(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE,
                         coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Alltoallv");
    return;
  }
  // Large: one (possibly derived-type) message per pair on the collective communicator.
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 0; r < size_; ++r) {
    requests.push_back(
        post(false, out + recv_offsets[r], recv_counts[r], r, 0, coll_comm_, "all_to_all recv"));
  }
  for (int r = 0; r < size_; ++r) {
    requests.push_back(post(true, const_cast<unsigned char*>(in) + send_offsets[r], send_counts[r],
                            r, 0, coll_comm_, "all_to_all send"));
  }
  wait_all(requests);
}

std::unique_ptr<Transport> MpiTransport::split(int color, int key) {
  MPI_Comm child = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_split(coll_comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "rank ", rank_,
         "/", size_, ": MPI_Comm_split (color ", color, ", key ", key, ")");
  if (child == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<MpiTransport>(new MpiTransport(child, max_chunk_bytes()));
}

}  // namespace dynatrain::comm
