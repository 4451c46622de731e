#include "comm/nccl/nccl_transport.h"

#include <algorithm>
#include <string>

#include "comm/nccl/nccl_comm.h"
#include "common/error.h"

namespace dynatrain::comm {
namespace {

using detail::check_cuda_call;
using detail::check_nccl;
using detail::NcclComm;
using detail::Staged;

// This rank's failure to use `device`, or "" when it can.
std::string device_problem(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  if (device >= 0 && device < n) return "";
  return "CUDA device " + std::to_string(device) + " does not exist; valid devices: " +
         (n == 0 ? std::string("none (no CUDA device or driver)") : "0.." + std::to_string(n - 1));
}

std::shared_ptr<NcclComm> make_comm(int device, void* stream) {
  auto c = std::make_shared<NcclComm>();
  c->device = device;
  c->use_device();
  if (stream) {
    c->stream = static_cast<cudaStream_t>(stream);
  } else {
    check_cuda_call(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    c->own_stream = true;
  }
  return c;
}

}  // namespace

std::unique_ptr<NcclTransport> NcclTransport::over(Transport& host, const NcclOptions& options) {
  // Every rank learns every rank's problem before anyone blocks in ncclCommInitRank.
  const std::string mine = device_problem(options.device);
  const auto all = all_gather_strings(host, mine);
  for (int r = 0; r < host.size(); ++r)
    if (!all[static_cast<std::size_t>(r)].empty())
      DT_INPUT_ERROR("comm/nccl on rank ", r, " of ", host.size(), ": ", all[static_cast<std::size_t>(r)]);
  auto c = make_comm(options.device, options.stream);
  ncclUniqueId id{};
  bool ok = true;
  if (host.rank() == 0) ok = ncclGetUniqueId(&id) == ncclSuccess;
  if (!agree_with_root(host, ok)) throw CommError("comm/nccl: ncclGetUniqueId failed on rank 0");
  host.broadcast(&id, sizeof id, 0);
  check_nccl(ncclCommInitRank(&c->comm, host.size(), id, host.rank()), nullptr, "ncclCommInitRank");
  std::vector<int> nodes(static_cast<std::size_t>(host.size()));
  for (int r = 0; r < host.size(); ++r) nodes[static_cast<std::size_t>(r)] = host.node_of(r);
  return std::unique_ptr<NcclTransport>(new NcclTransport(std::move(c), std::move(nodes)));
}

NcclTransport::NcclTransport(std::shared_ptr<detail::NcclComm> comm, std::vector<int> node_of)
    : comm_(std::move(comm)), node_of_(std::move(node_of)) {
  check_nccl(ncclCommUserRank(comm_->comm, &rank_), comm_->comm, "ncclCommUserRank");
  check_nccl(ncclCommCount(comm_->comm, &size_), comm_->comm, "ncclCommCount");
}

NcclTransport::~NcclTransport() = default;

void* NcclTransport::stream() const { return comm_->stream; }

int NcclTransport::node_of(int rank) const {
  DT_CHECK(rank >= 0 && rank < size_, "rank ", rank, " outside [0, ", size_, ")");
  return node_of_[static_cast<std::size_t>(rank)];
}

void NcclTransport::check_peer(int peer, int tag) const {
  DT_CHECK(peer >= 0 && peer < size_, "peer ", peer, " outside [0, ", size_, ")");
  DT_CHECK(tag >= 0 && tag <= kMaxTag, "tag ", tag, " outside [0, ", kMaxTag, "]");
}

std::unique_ptr<Request> NcclTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, tag);
  return comm_->post(comm_, true, const_cast<void*>(buf), bytes, peer);
}

std::unique_ptr<Request> NcclTransport::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, tag);
  return comm_->post(comm_, false, buf, bytes, peer);
}

void NcclTransport::sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf,
                             std::size_t recv_bytes, int src, int tag) {
  auto s = isend(send_buf, send_bytes, dst, tag);
  auto r = irecv(recv_buf, recv_bytes, src, tag);
  s->wait();
  r->wait();
}

std::unique_ptr<Request> NcclTransport::isend_runs(const void*, std::vector<ByteRun>, int, int) {
  DT_INPUT_ERROR(
      "comm/nccl does not support scattered messages (isend_runs): NCCL moves contiguous "
      "buffers; pack the runs and use isend (runs_direct() is false)");
}

std::unique_ptr<Request> NcclTransport::irecv_runs(void*, std::vector<ByteRun>, int, int) {
  DT_INPUT_ERROR(
      "comm/nccl does not support scattered messages (irecv_runs): NCCL moves contiguous "
      "buffers; receive into one buffer with irecv and unpack (runs_direct() is false)");
}

void NcclTransport::barrier() {
  float one = 1.0f;
  all_reduce_sum(&one, 1);
}

void NcclTransport::broadcast(void* buf, std::size_t bytes, int root) {
  DT_CHECK(root >= 0 && root < size_, "root ", root, " outside [0, ", size_, ")");
  if (bytes == 0) return;
  comm_->flush();
  Staged st(*comm_, buf, bytes, buf, bytes);
  check_nccl(ncclBroadcast(st.send(), st.recv(), bytes, ncclUint8, root, comm_->comm, comm_->stream), comm_->comm,
             "ncclBroadcast");
  st.finish();
}

void NcclTransport::all_reduce_sum(float* buf, std::size_t count) {
  if (count == 0) return;
  comm_->flush();
  Staged st(*comm_, buf, count * sizeof(float), buf, count * sizeof(float));
  check_nccl(ncclAllReduce(st.send(), st.recv(), count, ncclFloat, ncclSum, comm_->comm, comm_->stream), comm_->comm,
             "ncclAllReduce");
  st.finish();
}

void NcclTransport::all_gather(const float* send, float* recv, std::size_t count_per_rank) {
  all_gather_bytes(send, recv, count_per_rank * sizeof(float));
}

void NcclTransport::all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) {
  if (bytes_per_rank == 0) return;
  comm_->flush();
  Staged st(*comm_, send, bytes_per_rank, recv, bytes_per_rank * static_cast<std::size_t>(size_));
  check_nccl(ncclAllGather(st.send(), st.recv(), bytes_per_rank, ncclUint8, comm_->comm, comm_->stream), comm_->comm,
             "ncclAllGather");
  st.finish();
}

void NcclTransport::reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) {
  if (count_per_rank == 0) return;
  comm_->flush();
  const std::size_t bytes = count_per_rank * sizeof(float);
  Staged st(*comm_, send, bytes * static_cast<std::size_t>(size_), recv, bytes);
  check_nccl(ncclReduceScatter(st.send(), st.recv(), count_per_rank, ncclFloat, ncclSum, comm_->comm, comm_->stream),
             comm_->comm, "ncclReduceScatter");
  st.finish();
}

void NcclTransport::all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                               const std::vector<std::size_t>& send_offsets, void* recv,
                               const std::vector<std::size_t>& recv_counts,
                               const std::vector<std::size_t>& recv_offsets) {
  check_all_to_all_args(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  std::size_t send_extent = 0, recv_extent = 0;
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    send_extent = std::max(send_extent, send_offsets[i] + send_counts[i]);
    recv_extent = std::max(recv_extent, recv_offsets[i] + recv_counts[i]);
  }
  comm_->flush();
  Staged st(*comm_, send, send_extent, recv, recv_extent);
  const auto* s = static_cast<const std::byte*>(st.send());
  auto* d = static_cast<std::byte*>(st.recv());
  check_nccl(ncclGroupStart(), comm_->comm, "ncclGroupStart");
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (send_counts[i] > 0)
      check_nccl(ncclSend(s + send_offsets[i], send_counts[i], ncclUint8, r, comm_->comm, comm_->stream), comm_->comm,
                 "ncclSend (all_to_all)");
    if (recv_counts[i] > 0)
      check_nccl(ncclRecv(d + recv_offsets[i], recv_counts[i], ncclUint8, r, comm_->comm, comm_->stream), comm_->comm,
                 "ncclRecv (all_to_all)");
  }
  check_nccl(ncclGroupEnd(), comm_->comm, "ncclGroupEnd (all_to_all)");
  st.finish();
}

std::unique_ptr<Transport> NcclTransport::split(int color, int key) {
  comm_->flush();
  comm_->synchronize();
  auto child = std::make_shared<NcclComm>();
  child->device = comm_->device;
  child->stream = comm_->stream;  // not owned: the parent's (or the caller's) stream
  child->parent = comm_;
  check_nccl(ncclCommSplit(comm_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child->comm, nullptr),
             comm_->comm, "ncclCommSplit");
  if (color < 0) return nullptr;
  // The child's node of each of its ranks: gathered over the child from each one's parent rank.
  std::unique_ptr<NcclTransport> t(new NcclTransport(child, {}));
  const std::vector<int> parents = all_gather_values(*t, rank_);
  for (int p : parents) t->node_of_.push_back(node_of_[static_cast<std::size_t>(p)]);
  return t;
}

}  // namespace dynatrain::comm
