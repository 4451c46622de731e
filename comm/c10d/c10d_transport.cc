// The c10d Transport: point to point through c10d_requests.h, collectives on the group's own
// Gloo collectives (which use slots of their own, so they never match user messages).
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "comm/c10d/c10d_requests.h"
#include "comm/c10d/process_group_transport.h"
#include "comm/inproc/inproc_transport.h"
#include "common/error.h"

namespace dynatrain::comm {

namespace {

using c10d_detail::Group;
using c10d_detail::rethrow_as_comm_error;

// all_to_all's pair messages: a tag above every user tag (collectives never run concurrently).
constexpr int kCollectiveTag = kMaxTag + 1;

at::Tensor byte_tensor(const void* data, std::size_t bytes) {
  return torch::from_blob(const_cast<void*>(data), {static_cast<std::int64_t>(bytes)}, torch::kUInt8);
}
at::Tensor float_tensor(const float* data, std::size_t count) {
  return torch::from_blob(const_cast<float*>(data), {static_cast<std::int64_t>(count)}, torch::kFloat32);
}

std::int64_t host_id() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return static_cast<std::int64_t>(std::hash<std::string>{}(name));
}

class C10dTransport final : public Transport {
 public:
  C10dTransport(Group group, c10::intrusive_ptr<c10d::Store> store, std::string prefix, const C10dOptions& options)
      : group_(std::move(group)),
        store_(std::move(store)),
        prefix_(std::move(prefix)),
        options_(options),
        rank_(group_->getRank()),
        size_(group_->getSize()),
        channels_(group_, rank_) {
    InprocOptions self;
    self.wait_timeout = options.timeout;
    self_ = std::make_unique<InprocWorld>(1, self);
    const auto hosts = all_gather_values(*this, host_id());
    for (int r = 0; r < size_; ++r)  // the node of a rank: the lowest rank on its host
      node_of_.push_back(static_cast<int>(std::find(hosts.begin(), hosts.end(), hosts[r]) - hosts.begin()));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "c10d"; }
  int node_of(int rank) const override { return node_of_.at(static_cast<std::size_t>(rank)); }

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override {
    check_peer_tag(peer, tag, "isend");
    return send(buf, bytes, peer, tag);
  }
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override {
    check_peer_tag(peer, tag, "irecv");
    return recv(buf, bytes, peer, tag);
  }
  void sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf, std::size_t recv_bytes, int src,
                int tag) override {
    std::vector<std::unique_ptr<Request>> both;
    both.push_back(irecv(recv_buf, recv_bytes, src, tag));
    both.push_back(isend(send_buf, send_bytes, dst, tag));
    wait_all(both);
  }

  void barrier() override {
    collective("barrier", [&] { return group_->barrier(); });
  }
  void broadcast(void* buf, std::size_t bytes, int root) override {
    DT_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " outside [0, ", size_, ")");
    if (bytes == 0) return;
    std::vector<at::Tensor> t{byte_tensor(buf, bytes)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    collective("broadcast", [&] { return group_->broadcast(t, o); });
  }
  void all_reduce_sum(float* buf, std::size_t count) override {
    if (count == 0) return;
    std::vector<at::Tensor> t{float_tensor(buf, count)};
    collective("all_reduce_sum", [&] { return group_->allreduce(t); });
  }
  void all_gather(const float* send, float* recv, std::size_t count_per_rank) override {
    all_gather_bytes(send, recv, count_per_rank * sizeof(float));
  }
  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override {
    if (bytes_per_rank == 0) return;
    std::vector<at::Tensor> in{byte_tensor(send, bytes_per_rank)};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size_; ++r)
      out[0].push_back(byte_tensor(static_cast<std::byte*>(recv) + r * bytes_per_rank, bytes_per_rank));
    collective("all_gather", [&] { return group_->allgather(out, in); });
  }
  // Gloo has no reduce_scatter: an all-reduce of a copy, of which this rank keeps its block.
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) override {
    std::vector<float> all(send, send + count_per_rank * static_cast<std::size_t>(size_));
    all_reduce_sum(all.data(), all.size());
    std::copy_n(all.data() + count_per_rank * static_cast<std::size_t>(rank_), count_per_rank, recv);
  }
  void all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                  const std::vector<std::size_t>& send_offsets, void* recv, const std::vector<std::size_t>& recv_counts,
                  const std::vector<std::size_t>& recv_offsets) override;
  std::unique_ptr<Transport> split(int color, int key) override;
  C10dParts parts() const { return {store_, options_, rank_, prefix_}; }

 private:
  void check_peer_tag(int peer, int tag, const char* what) const {
    DT_CHECK(peer >= 0 && peer < size_, what, ": peer ", peer, " outside [0, ", size_, ")");
    DT_CHECK(tag >= 0 && tag <= kMaxTag, what, ": tag ", tag, " outside [0, ", kMaxTag, "]");
  }
  // Messages to self never reach Gloo (it has no pair to self): an in-process mailbox.
  std::unique_ptr<Request> send(const void* buf, std::size_t bytes, int peer, int tag) {
    if (peer == rank_) return self_->transport(0).isend(buf, bytes, 0, tag);
    return std::make_unique<c10d_detail::SendRequest>(group_, rank_, buf, bytes, peer, tag);
  }
  std::unique_ptr<Request> recv(void* buf, std::size_t bytes, int peer, int tag) {
    if (peer == rank_) return self_->transport(0).irecv(buf, bytes, 0, tag);
    return std::make_unique<c10d_detail::RecvRequest>(
        channels_.at(peer, tag).post(buf, bytes), rank_,
        ::dynatrain::detail::concat("irecv from ", peer, " (tag ", tag, ", ", bytes, " bytes)"));
  }
  template <typename Start>
  void collective(const char* what, Start&& start) {
    try {
      start()->wait();
    } catch (...) {
      rethrow_as_comm_error(rank_, what);
    }
  }

  Group group_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  C10dOptions options_;
  int rank_, size_;
  int splits_ = 0;  // split() calls so far: names the key space of each child group
  std::vector<int> node_of_;
  std::unique_ptr<InprocWorld> self_;
  c10d_detail::Channels channels_;  // last: its workers reference group_
};

void C10dTransport::all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                               const std::vector<std::size_t>& send_offsets, void* recv,
                               const std::vector<std::size_t>& recv_counts,
                               const std::vector<std::size_t>& recv_offsets) {
  check_all_to_all_args(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  std::vector<std::unique_ptr<Request>> reqs;
  for (int q = 0; q < size_; ++q)
    if (q != rank_) reqs.push_back(this->recv(out + recv_offsets[q], recv_counts[q], q, kCollectiveTag));
  for (int q = 0; q < size_; ++q)
    if (q != rank_) reqs.push_back(this->send(in + send_offsets[q], send_counts[q], q, kCollectiveTag));
  const auto me = static_cast<std::size_t>(rank_);
  if (send_counts[me] != recv_counts[me]) {
    wait_all(reqs);
    throw CommError(::dynatrain::detail::concat("c10d rank ", rank_, ": all_to_all: ", send_counts[me],
                                                " bytes to self, ", recv_counts[me], " expected"));
  }
  if (send_counts[me] > 0) std::memcpy(out + recv_offsets[me], in + send_offsets[me], send_counts[me]);
  wait_all(reqs);
}

std::unique_ptr<Transport> C10dTransport::split(int color, int key) {
  struct Entry {
    std::int32_t color, key;
  };
  const auto all = all_gather_values(*this, Entry{color, key});
  const int serial = ++splits_;
  if (color < 0) return nullptr;
  std::vector<int> members;  // ranks of the new group, ordered by (key, rank)
  for (int r = 0; r < size_; ++r)
    if (all[r].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  std::string prefix = ::dynatrain::detail::concat(prefix_, "/split", serial, ".", color);
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  try {
    auto group = gloo_group(store, new_rank, static_cast<int>(members.size()), options_);
    return std::make_unique<C10dTransport>(std::move(group), store_, std::move(prefix), options_);
  } catch (...) {
    rethrow_as_comm_error(rank_, ::dynatrain::detail::concat("split(color ", color, ", key ", key, ")"));
  }
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                                  const C10dOptions& options) {
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (!options.bind_host.empty())
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.bind_host));
  else if (is_loopback(options.master_addr))
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else if (ifname && *ifname)
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  const GroupSockets record;  // its connections, for abandon_c10d_groups()
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo);
}

C10dParts c10d_parts(const Transport& t) {
  const auto* c = dynamic_cast<const C10dTransport*>(&t);
  return c ? c->parts() : C10dParts{};
}

std::unique_ptr<Transport> process_group_transport(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                   c10::intrusive_ptr<c10d::Store> store, std::string prefix,
                                                   const C10dOptions& options) {
  DT_CHECK(group, "process_group_transport: no process group");
  return std::make_unique<C10dTransport>(std::move(group), std::move(store), std::move(prefix), options);
}

}  // namespace dynatrain::comm
