#include "comm/transport.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "common/error.h"

namespace dynatrain::comm {

void wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  std::exception_ptr first;
  for (auto& request : requests) {
    if (!request) continue;
    try {
      request->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Transport::all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) {
  const std::size_t words = (bytes_per_rank + sizeof(float) - 1) / sizeof(float);
  const auto n = static_cast<std::size_t>(size());
  std::vector<float> mine(words), all(words * n);
  if (bytes_per_rank > 0) std::memcpy(mine.data(), send, bytes_per_rank);
  all_gather(mine.data(), all.data(), words);
  for (std::size_t r = 0; r < n; ++r)
    if (bytes_per_rank > 0)
      std::memcpy(static_cast<std::byte*>(recv) + r * bytes_per_rank, all.data() + r * words, bytes_per_rank);
}

std::size_t runs_bytes(const std::vector<ByteRun>& runs) {
  std::size_t n = 0;
  for (const ByteRun& r : runs) n += r.bytes;
  return n;
}

void copy_runs(const std::byte* src, const std::vector<ByteRun>& from, std::byte* dst, const std::vector<ByteRun>& to) {
  std::size_t i = 0, j = 0, at_i = 0, at_j = 0;  // run index and bytes done in it, per side
  while (i < from.size() && j < to.size()) {
    const std::size_t n = std::min(from[i].bytes - at_i, to[j].bytes - at_j);
    if (n > 0) std::memcpy(dst + to[j].offset + at_j, src + from[i].offset + at_i, n);
    at_i += n, at_j += n;
    if (at_i == from[i].bytes) ++i, at_i = 0;
    if (at_j == to[j].bytes) ++j, at_j = 0;
  }
}

namespace {

// The default scattered send: the runs packed into one owned buffer, sent as one message.
class PackedSend final : public Request {
 public:
  PackedSend(Transport& t, const void* base, const std::vector<ByteRun>& runs, int peer, int tag)
      : data_(runs_bytes(runs)) {
    copy_runs(static_cast<const std::byte*>(base), runs, data_.data(), {{0, data_.size()}});
    inner_ = t.isend(data_.data(), data_.size(), peer, tag);
  }
  void wait() override { inner_->wait(); }
  bool test() override { return inner_->test(); }

 private:
  std::vector<std::byte> data_;
  std::unique_ptr<Request> inner_;
};

// The default scattered receive: one message into an owned buffer, unpacked when it completed.
class UnpackedRecv final : public Request {
 public:
  UnpackedRecv(Transport& t, void* base, std::vector<ByteRun> runs, int peer, int tag)
      : base_(static_cast<std::byte*>(base)), runs_(std::move(runs)), data_(runs_bytes(runs_)) {
    inner_ = t.irecv(data_.data(), data_.size(), peer, tag);
  }
  ~UnpackedRecv() override {
    if (inner_) inner_.reset();  // waits; nothing is unpacked after a failure or an abandon
  }
  void wait() override {
    if (done_) return;
    inner_->wait();
    finish();
  }
  bool test() override {
    if (done_) return true;
    if (!inner_->test()) return false;
    finish();
    return true;
  }

 private:
  void finish() {
    done_ = true;
    copy_runs(data_.data(), {{0, data_.size()}}, base_, runs_);
  }
  std::byte* base_;
  std::vector<ByteRun> runs_;
  std::vector<std::byte> data_;
  std::unique_ptr<Request> inner_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<Request> Transport::isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag) {
  return std::make_unique<PackedSend>(*this, base, runs, peer, tag);
}

std::unique_ptr<Request> Transport::irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag) {
  return std::make_unique<UnpackedRecv>(*this, base, std::move(runs), peer, tag);
}

bool agree_with_root(Transport& transport, bool ok) {
  std::uint8_t flag = ok ? 1 : 0;
  transport.broadcast(&flag, sizeof flag, 0);
  return flag != 0;
}

void broadcast_string(Transport& transport, std::string& text) {
  std::uint64_t n = text.size();
  transport.broadcast(&n, sizeof(n), 0);
  text.resize(n);
  if (n > 0) transport.broadcast(text.data(), n, 0);
}

std::vector<std::string> all_gather_strings(Transport& transport, const std::string& mine) {
  const std::vector<std::uint64_t> sizes = all_gather_values(transport, static_cast<std::uint64_t>(mine.size()));
  const std::uint64_t widest = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = mine;
  padded.resize(widest);
  std::string all(widest * sizes.size(), '\0');
  if (widest > 0) transport.all_gather_bytes(padded.data(), all.data(), widest);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < sizes.size(); ++r) out.push_back(all.substr(r * widest, sizes[r]));
  return out;
}

void check_all_to_all_args(int size, const std::vector<std::size_t>& send_counts,
                           const std::vector<std::size_t>& send_offsets, const std::vector<std::size_t>& recv_counts,
                           const std::vector<std::size_t>& recv_offsets) {
  const auto n = static_cast<std::size_t>(size);
  DT_CHECK(send_counts.size() == n && send_offsets.size() == n && recv_counts.size() == n && recv_offsets.size() == n,
           "all_to_all: count/offset vectors must have size() = ", n, " entries");
}

}  // namespace dynatrain::comm
