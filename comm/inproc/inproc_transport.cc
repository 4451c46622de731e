#include "comm/inproc/inproc_transport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <tuple>

#include "common/error.h"

namespace dynatrain::comm {

namespace detail {

struct InprocKey {
  std::uint64_t comm;
  int channel;
  int src;
  int dst;
  int tag;
  auto operator<=>(const InprocKey&) const = default;
};

struct InprocOp {
  enum class Phase { kPosted, kCopying, kDone };
  bool is_send = false;
  const void* send_buf = nullptr;
  void* recv_buf = nullptr;
  std::size_t bytes = 0;
  bool scattered = false;     // posted by isend_runs / irecv_runs
  std::vector<ByteRun> runs;  // scattered: the runs of the buffer, in message order
  InprocKey key{};
  Phase phase = Phase::kPosted;
  std::string error;      // non-empty: the operation failed with this message
  bool reported = false;  // the error was already thrown once
};

using OpPtr = std::shared_ptr<InprocOp>;

// One mutex and one condition variable for the whole world: simple, and fast enough for tests.
struct InprocState {
  explicit InprocState(InprocOptions opts) : options(opts) {}

  InprocOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::map<InprocKey, std::deque<OpPtr>> sends;  // posted, unmatched sends
  std::map<InprocKey, std::deque<OpPtr>> recvs;  // posted, unmatched receives
  bool aborted = false;
  std::string abort_reason;
  std::uint64_t next_comm_id = 1;  // 0 is the world
  struct PendingSplit {
    std::uint64_t id;
    int remaining;
  };
  // (parent communicator, split sequence number, color) -> new communicator being formed
  std::map<std::tuple<std::uint64_t, std::uint64_t, int>, PendingSplit> splits;
};

}  // namespace detail

namespace {

using detail::InprocOp;
using detail::InprocState;
using detail::OpPtr;

std::string describe(const InprocOp& op) {
  return ::dynatrain::detail::concat(op.is_send ? "isend to " : "irecv from ", op.is_send ? op.key.dst : op.key.src,
                                     op.is_send ? " from rank " : " on rank ", op.is_send ? op.key.src : op.key.dst,
                                     " (tag ", op.key.tag, op.key.channel == 0 ? "" : ", collective", ", ", op.bytes,
                                     " bytes, communicator ", op.key.comm, ")");
}

// Removes `op` from its queue if it is still unmatched; if a copy is in flight, waits for it.
// Afterwards nobody touches op's buffer any more. Caller holds the lock.
void retire(InprocState& st, std::unique_lock<std::mutex>& lock, const OpPtr& op, const std::string& error) {
  if (op->phase == InprocOp::Phase::kPosted) {
    auto& queues = op->is_send ? st.sends : st.recvs;
    auto it = queues.find(op->key);
    if (it != queues.end()) {
      auto& q = it->second;
      q.erase(std::remove(q.begin(), q.end(), op), q.end());
      if (q.empty()) queues.erase(it);
    }
    op->phase = InprocOp::Phase::kDone;
    op->error = error;
    return;
  }
  st.cv.wait(lock, [&] { return op->phase == InprocOp::Phase::kDone; });
}

class InprocRequest final : public Request {
 public:
  InprocRequest(std::shared_ptr<InprocState> state, OpPtr op) : state_(std::move(state)), op_(std::move(op)) {}

  ~InprocRequest() override {
    try {
      wait();
    } catch (...) {
      // A Request destroyed before completion waits; a failure there cannot be reported.
    }
  }

  void wait() override {
    std::unique_lock lock(state_->mu);
    const auto deadline = std::chrono::steady_clock::now() + state_->options.wait_timeout;
    while (op_->phase != InprocOp::Phase::kDone) {
      if (state_->aborted) {
        retire(*state_, lock, op_, "inproc: world aborted: " + state_->abort_reason);
        break;
      }
      if (state_->cv.wait_until(lock, deadline) == std::cv_status::timeout && op_->phase != InprocOp::Phase::kDone) {
        retire(*state_, lock, op_,
               ::dynatrain::detail::concat("inproc: ", describe(*op_), " did not complete within ",
                                           state_->options.wait_timeout.count(), " ms (deadlock or missing partner?)"));
        break;
      }
    }
    report(lock);
  }

  bool test() override {
    std::unique_lock lock(state_->mu);
    if (op_->phase != InprocOp::Phase::kDone) {
      if (!state_->aborted) return false;
      retire(*state_, lock, op_, "inproc: world aborted: " + state_->abort_reason);
    }
    report(lock);
    return true;
  }

 private:
  void report(std::unique_lock<std::mutex>& lock) {
    if (op_->error.empty() || op_->reported) return;
    op_->reported = true;
    std::string message = op_->error;
    lock.unlock();
    throw CommError(message);
  }

  std::shared_ptr<InprocState> state_;
  OpPtr op_;
};

void check_peer(int peer, int size, const char* what) {
  DT_CHECK(peer >= 0 && peer < size, what, " rank ", peer, " is outside [0, ", size, ")");
}

void check_tag(int tag) { DT_CHECK(tag >= 0 && tag <= kMaxTag, "tag ", tag, " is outside [0, ", kMaxTag, "]"); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// InprocTransport

InprocTransport::InprocTransport(std::shared_ptr<detail::InprocState> state, std::uint64_t comm_id, int rank, int size,
                                 std::vector<int> nodes)
    : state_(std::move(state)), comm_id_(comm_id), rank_(rank), size_(size), nodes_(std::move(nodes)) {}

int InprocTransport::node_of(int rank) const {
  check_peer(rank, size_, "InprocTransport::node_of:");
  return nodes_.empty() ? 0 : nodes_[static_cast<std::size_t>(rank)];
}

InprocTransport::~InprocTransport() = default;

std::unique_ptr<Request> InprocTransport::post(bool is_send, const void* send_buf, void* recv_buf, std::size_t bytes,
                                               int peer, int tag, int channel, std::vector<ByteRun>* runs) {
  auto op = std::make_shared<InprocOp>();
  if (runs) {
    op->scattered = true;
    op->runs = std::move(*runs);
  }
  op->is_send = is_send;
  op->send_buf = send_buf;
  op->recv_buf = recv_buf;
  op->bytes = bytes;
  op->key = is_send ? detail::InprocKey{comm_id_, channel, rank_, peer, tag}
                    : detail::InprocKey{comm_id_, channel, peer, rank_, tag};

  std::unique_lock lock(state_->mu);
  if (state_->aborted) {
    throw CommError("inproc: world aborted: " + state_->abort_reason);
  }
  auto& partners = is_send ? state_->recvs : state_->sends;
  auto it = partners.find(op->key);
  if (it == partners.end()) {
    (is_send ? state_->sends : state_->recvs)[op->key].push_back(op);
    return std::make_unique<InprocRequest>(state_, op);
  }

  // Matched: this side does the copy, outside the lock (both buffers are pinned by their ops).
  OpPtr partner = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) partners.erase(it);
  const InprocOp& send = is_send ? *op : *partner;
  const InprocOp& recv = is_send ? *partner : *op;
  if (send.bytes != recv.bytes || send.scattered != recv.scattered) {
    const std::string error =
        ::dynatrain::detail::concat("inproc: message ", send.bytes != recv.bytes ? "size" : "kind (runs vs plain)",
                                    " mismatch: ", describe(send), " met ", describe(recv));
    op->error = partner->error = error;
    op->phase = partner->phase = InprocOp::Phase::kDone;
    state_->cv.notify_all();
    return std::make_unique<InprocRequest>(state_, op);
  }
  op->phase = partner->phase = InprocOp::Phase::kCopying;
  lock.unlock();
  if (send.scattered)
    copy_runs(static_cast<const std::byte*>(send.send_buf), send.runs, static_cast<std::byte*>(recv.recv_buf),
              recv.runs);
  else if (send.bytes > 0)
    std::memcpy(recv.recv_buf, send.send_buf, send.bytes);
  lock.lock();
  op->phase = partner->phase = InprocOp::Phase::kDone;
  state_->cv.notify_all();
  return std::make_unique<InprocRequest>(state_, op);
}

std::unique_ptr<Request> InprocTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, size_, "isend: destination");
  check_tag(tag);
  return post(true, buf, nullptr, bytes, peer, tag, 0);
}

std::unique_ptr<Request> InprocTransport::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, size_, "irecv: source");
  check_tag(tag);
  return post(false, nullptr, buf, bytes, peer, tag, 0);
}

std::unique_ptr<Request> InprocTransport::isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag) {
  check_peer(peer, size_, "isend_runs: destination");
  check_tag(tag);
  const std::size_t bytes = runs_bytes(runs);
  return post(true, base, nullptr, bytes, peer, tag, 0, &runs);
}

std::unique_ptr<Request> InprocTransport::irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag) {
  check_peer(peer, size_, "irecv_runs: source");
  check_tag(tag);
  const std::size_t bytes = runs_bytes(runs);
  return post(false, nullptr, base, bytes, peer, tag, 0, &runs);
}

void InprocTransport::sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf,
                               std::size_t recv_bytes, int src, int tag) {
  check_peer(dst, size_, "sendrecv: destination");
  check_peer(src, size_, "sendrecv: source");
  check_tag(tag);
  std::vector<std::unique_ptr<Request>> requests;
  requests.push_back(post(false, nullptr, recv_buf, recv_bytes, src, tag, 0));
  requests.push_back(post(true, send_buf, nullptr, send_bytes, dst, tag, 0));
  wait_all(requests);
}

// ---- collectives, all on channel 1 with tag 0 (FIFO per pair keeps successive calls apart) ----

void InprocTransport::barrier() {
  // Gather a token at rank 0, then release everybody.
  std::vector<std::unique_ptr<Request>> requests;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) requests.push_back(post(false, nullptr, nullptr, 0, r, 0, 1));
    wait_all(requests);
    requests.clear();
    for (int r = 1; r < size_; ++r) requests.push_back(post(true, nullptr, nullptr, 0, r, 0, 1));
  } else {
    post(true, nullptr, nullptr, 0, 0, 0, 1)->wait();
    requests.push_back(post(false, nullptr, nullptr, 0, 0, 0, 1));
  }
  wait_all(requests);
}

void InprocTransport::broadcast(void* buf, std::size_t bytes, int root) {
  check_peer(root, size_, "broadcast: root");
  std::vector<std::unique_ptr<Request>> requests;
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) {
      if (r != root) requests.push_back(post(true, buf, nullptr, bytes, r, 0, 1));
    }
  } else {
    requests.push_back(post(false, nullptr, buf, bytes, root, 0, 1));
  }
  wait_all(requests);
}

void InprocTransport::all_reduce_sum(float* buf, std::size_t count) {
  const std::size_t bytes = count * sizeof(float);
  if (rank_ != 0) {
    post(true, buf, nullptr, bytes, 0, 0, 1)->wait();
    post(false, nullptr, buf, bytes, 0, 0, 1)->wait();
    return;
  }
  std::vector<float> parts(count * static_cast<std::size_t>(std::max(size_ - 1, 0)));
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 1; r < size_; ++r) {
    requests.push_back(post(false, nullptr, parts.data() + (r - 1) * count, bytes, r, 0, 1));
  }
  wait_all(requests);
  for (int r = 1; r < size_; ++r) {
    const float* part = parts.data() + (r - 1) * count;
    for (std::size_t i = 0; i < count; ++i) buf[i] += part[i];
  }
  requests.clear();
  for (int r = 1; r < size_; ++r) requests.push_back(post(true, buf, nullptr, bytes, r, 0, 1));
  wait_all(requests);
}

void InprocTransport::allgather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) {
  auto* out = static_cast<unsigned char*>(recv);
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) {
      requests.push_back(post(false, nullptr, out + r * bytes_per_rank, bytes_per_rank, r, 0, 1));
    }
  }
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) requests.push_back(post(true, send, nullptr, bytes_per_rank, r, 0, 1));
  }
  if (bytes_per_rank > 0) std::memcpy(out + rank_ * bytes_per_rank, send, bytes_per_rank);
  wait_all(requests);
}

void InprocTransport::all_gather(const float* send, float* recv, std::size_t count_per_rank) {
  allgather_bytes(send, recv, count_per_rank * sizeof(float));
}

void InprocTransport::reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) {
  const std::size_t count = count_per_rank;
  const std::size_t bytes = count * sizeof(float);
  std::vector<float> parts(count * static_cast<std::size_t>(size_));
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) requests.push_back(post(false, nullptr, parts.data() + r * count, bytes, r, 0, 1));
  }
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) requests.push_back(post(true, send + r * count, nullptr, bytes, r, 0, 1));
  }
  wait_all(requests);
  if (count > 0) std::memcpy(parts.data() + rank_ * count, send + rank_ * count, bytes);
  // Rank order, so every run gives the same bits.
  for (std::size_t i = 0; i < count; ++i) recv[i] = parts[i];
  for (int r = 1; r < size_; ++r) {
    for (std::size_t i = 0; i < count; ++i) recv[i] += parts[r * count + i];
  }
}

void InprocTransport::all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                                 const std::vector<std::size_t>& send_offsets, void* recv,
                                 const std::vector<std::size_t>& recv_counts,
                                 const std::vector<std::size_t>& recv_offsets) {
  check_all_to_all_args(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  std::vector<std::unique_ptr<Request>> requests;
  // The self block goes through the mailbox too, so a size mismatch is reported the same way.
  for (int r = 0; r < size_; ++r) {
    requests.push_back(post(false, nullptr, out + recv_offsets[r], recv_counts[r], r, 0, 1));
  }
  for (int r = 0; r < size_; ++r) {
    requests.push_back(post(true, in + send_offsets[r], nullptr, send_counts[r], r, 0, 1));
  }
  wait_all(requests);
}

std::unique_ptr<Transport> InprocTransport::split(int color, int key) {
  const std::int32_t mine[2] = {color, key};
  std::vector<std::int32_t> all(2 * static_cast<std::size_t>(size_));
  allgather_bytes(mine, all.data(), sizeof(mine));
  const std::uint64_t seq = split_seq_++;
  if (color < 0) return nullptr;

  std::vector<std::pair<int, int>> members;  // (key, old rank) of everybody with my color
  for (int r = 0; r < size_; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  const int new_size = static_cast<int>(members.size());
  const int new_rank =
      static_cast<int>(std::find(members.begin(), members.end(), std::make_pair(key, rank_)) - members.begin());

  std::uint64_t id = 0;
  {
    std::lock_guard lock(state_->mu);
    const auto slot = std::make_tuple(comm_id_, seq, color);
    auto it = state_->splits.find(slot);
    if (it == state_->splits.end()) {
      it = state_->splits.emplace(slot, InprocState::PendingSplit{state_->next_comm_id++, new_size}).first;
    }
    id = it->second.id;
    if (--it->second.remaining == 0) state_->splits.erase(it);
  }
  std::vector<int> nodes;
  if (!nodes_.empty())
    for (const auto& [k, old] : members) nodes.push_back(nodes_[static_cast<std::size_t>(old)]);
  return std::make_unique<InprocTransport>(state_, id, new_rank, new_size, std::move(nodes));
}

// ---------------------------------------------------------------------------------------------
// InprocWorld and run_ranks

InprocWorld::InprocWorld(int size, InprocOptions options) : state_(std::make_shared<InprocState>(options)) {
  DT_CHECK(size >= 1, "InprocWorld needs at least one rank, got ", size);
  DT_CHECK(options.ranks_per_node >= 0, "ranks_per_node ", options.ranks_per_node);
  std::vector<int> nodes;
  if (options.ranks_per_node > 0)
    for (int r = 0; r < size; ++r) nodes.push_back(r / options.ranks_per_node);
  for (int r = 0; r < size; ++r) {
    ranks_.push_back(std::make_unique<InprocTransport>(state_, 0, r, size, nodes));
  }
}

InprocWorld::~InprocWorld() = default;

Transport& InprocWorld::transport(int rank) {
  check_peer(rank, size(), "InprocWorld::transport:");
  return *ranks_[static_cast<std::size_t>(rank)];
}

void InprocWorld::abort(const std::string& reason) {
  std::lock_guard lock(state_->mu);
  if (!state_->aborted) {
    state_->aborted = true;
    try {
      state_->abort_reason = reason;
    } catch (const std::bad_alloc&) {  // out of memory: aborted without a reason
    }
  }
  state_->cv.notify_all();
}

namespace {

// "rank R failed: WHAT", the others' abort reason; "" when memory is short even for that text
// (a rank that ran out of memory: its error, std::bad_alloc, is what run_ranks rethrows).
std::string failure_text(const std::exception_ptr& error, int rank) noexcept {
  try {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return ::dynatrain::detail::concat("rank ", rank, " failed: ", e.what());
    } catch (...) {
      return ::dynatrain::detail::concat("rank ", rank, " failed with a non-standard exception");
    }
  } catch (...) {
    return {};
  }
}

}  // namespace

void run_ranks(int n, std::function<void(Transport&)> body, InprocOptions options) {
  InprocWorld world(n, options);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  // A thread that cannot start (its stack or its state is memory: `ulimit -v`, or a thread
  // limit) ends the ranks already running, which are joined before the error leaves: no thread
  // is left joinable, and no error escapes a thread (each is kept for the caller).
  auto start_failed = [&](int r, std::error_code code) {
    std::exception_ptr error;
    try {
      error = std::make_exception_ptr(std::system_error(
          code,
          ::dynatrain::detail::concat("out of memory or threads: cannot start the thread of rank ", r, " of ", n)));
    } catch (...) {
      error = std::current_exception();  // no memory for the message: its std::bad_alloc
    }
    {
      std::lock_guard lock(mu);
      first = error;
    }
    world.abort(failure_text(error, r));
  };
  for (int r = 0; r < n; ++r) {
    try {
      threads.emplace_back([&, r] {
        std::exception_ptr error;
        try {
          body(world.transport(r));
          return;
        } catch (...) {
          error = std::current_exception();
        }
        {
          std::lock_guard lock(mu);
          if (!first) first = error;
        }
        world.abort(failure_text(error, r));
      });
    } catch (const std::system_error& e) {
      start_failed(r, e.code());
      break;
    } catch (const std::bad_alloc&) {
      start_failed(r, std::make_error_code(std::errc::not_enough_memory));
      break;
    }
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace dynatrain::comm
