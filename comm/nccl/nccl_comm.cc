#include "comm/nccl/nccl_comm.h"

#include <string>

#include "common/cuda_check.h"
#include "common/error.h"

namespace dynatrain::comm::detail {
namespace {

void* device_scratch(NcclComm& c, std::size_t bytes) {
  void* p = nullptr;
  check_cuda_call(cudaMallocAsync(&p, bytes, c.stream), "cudaMallocAsync (staging)");
  return p;
}

class NcclRequest final : public Request {
 public:
  NcclRequest(std::shared_ptr<NcclComm> comm, std::shared_ptr<P2pOp> op) : comm_(std::move(comm)), op_(std::move(op)) {}
  ~NcclRequest() override {
    try {
      wait();
    } catch (...) {  // reported by the wait() the owner skipped; nothing is left in use
    }
  }
  void wait() override {
    if (!op_->finished) comm_->finish(*op_);
  }
  bool test() override {
    if (op_->finished) return true;
    comm_->flush();
    const cudaError_t e = cudaEventQuery(*op_->done);
    if (e == cudaErrorNotReady) return false;
    comm_->finish(*op_);
    return true;
  }

 private:
  std::shared_ptr<NcclComm> comm_;
  std::shared_ptr<P2pOp> op_;
};

}  // namespace

void check_nccl(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return;
  std::string detail = comm ? ncclGetLastError(comm) : "";
  throw CommError(std::string("comm/nccl: ") + what + " failed: " + ncclGetErrorString(r) +
                  (detail.empty() ? "" : " (" + detail + ")"));
}

void check_cuda_call(cudaError_t e, const char* what) { check_cuda(e, "comm/nccl", what); }

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

NcclComm::~NcclComm() {
  (void)cudaSetDevice(device);
  (void)cudaStreamSynchronize(stream);
  if (comm) (void)ncclCommDestroy(comm);
  if (own_stream) (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();
}

void NcclComm::use_device() const {
  int current = -1;
  check_cuda_call(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) check_cuda_call(cudaSetDevice(device), "cudaSetDevice");
}

std::unique_ptr<Request> NcclComm::post(const std::shared_ptr<NcclComm>& self, bool send, void* buf, std::size_t bytes,
                                        int peer) {
  auto op = std::make_shared<P2pOp>();
  op->send = send;
  op->bytes = bytes;
  op->peer = peer;
  op->dev = buf;
  use_device();
  if (bytes > 0 && !is_device_pointer(buf)) {
    op->scratch = op->dev = device_scratch(*this, bytes);
    if (send)
      check_cuda_call(cudaMemcpyAsync(op->scratch, buf, bytes, cudaMemcpyHostToDevice, stream),
                      "cudaMemcpyAsync (staging a host send)");
    else
      op->host_dst = buf;
  }
  std::lock_guard lock(mu);
  if (bytes == 0) {
    op->finished = true;  // both sides skip empty messages alike (sizes must match)
  } else {
    queue.push_back(op);
  }
  return std::make_unique<NcclRequest>(self, op);
}

void NcclComm::flush() {
  std::lock_guard lock(mu);
  if (queue.empty()) return;
  use_device();
  check_nccl(ncclGroupStart(), comm, "ncclGroupStart");
  for (const auto& op : queue) {
    if (op->send)
      check_nccl(ncclSend(op->dev, op->bytes, ncclUint8, op->peer, comm, stream), comm, "ncclSend");
    else
      check_nccl(ncclRecv(op->dev, op->bytes, ncclUint8, op->peer, comm, stream), comm, "ncclRecv");
  }
  check_nccl(ncclGroupEnd(), comm, "ncclGroupEnd");
  auto done = std::shared_ptr<cudaEvent_t>(new cudaEvent_t(nullptr), [](cudaEvent_t* e) {
    if (*e) (void)cudaEventDestroy(*e);
    delete e;
  });
  check_cuda_call(cudaEventCreateWithFlags(done.get(), cudaEventDisableTiming), "cudaEventCreate");
  check_cuda_call(cudaEventRecord(*done, stream), "cudaEventRecord");
  for (const auto& op : queue) op->done = done;
  queue.clear();
}

void NcclComm::finish(P2pOp& op) {
  flush();
  use_device();
  op.finished = true;  // reported once: a later wait() returns at once
  check_cuda_call(cudaEventSynchronize(*op.done), op.send ? "the wait for an ncclSend" : "the wait for an ncclRecv");
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(comm, &async), comm, "ncclCommGetAsyncError");
  check_nccl(async, comm, op.send ? "ncclSend" : "ncclRecv");
  if (op.host_dst)
    check_cuda_call(cudaMemcpyAsync(op.host_dst, op.scratch, op.bytes, cudaMemcpyDeviceToHost, stream),
                    "cudaMemcpyAsync (staged receive)");
  if (op.scratch) check_cuda_call(cudaFreeAsync(op.scratch, stream), "cudaFreeAsync (staging)");
  if (op.host_dst) synchronize();
}

void NcclComm::synchronize() {
  use_device();
  check_cuda_call(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(comm, &async), comm, "ncclCommGetAsyncError");
  check_nccl(async, comm, "an NCCL operation");
}

Staged::Staged(NcclComm& c, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes)
    : c_(c), send_(send), recv_(recv), recv_bytes_(recv_bytes) {
  c.use_device();
  const bool in_place = send == recv;
  if (recv_bytes > 0 && !is_device_pointer(recv)) {
    host_recv_ = recv;
    recv_ = device_scratch(c, recv_bytes);
    scratch_.push_back(recv_);
    if (in_place) {
      check_cuda_call(cudaMemcpyAsync(recv_, send, send_bytes, cudaMemcpyHostToDevice, c.stream),
                      "cudaMemcpyAsync (staging a host buffer)");
      send_ = recv_;
    }
  }
  if (!in_place && send_bytes > 0 && !is_device_pointer(send)) {
    void* s = device_scratch(c, send_bytes);
    scratch_.push_back(s);
    check_cuda_call(cudaMemcpyAsync(s, send, send_bytes, cudaMemcpyHostToDevice, c.stream),
                    "cudaMemcpyAsync (staging a host buffer)");
    send_ = s;
  }
}

Staged::~Staged() {
  for (void* p : scratch_) (void)cudaFreeAsync(p, c_.stream);
}

void Staged::finish() {
  if (host_recv_)
    check_cuda_call(cudaMemcpyAsync(host_recv_, recv_, recv_bytes_, cudaMemcpyDeviceToHost, c_.stream),
                    "cudaMemcpyAsync (staged result)");
  c_.synchronize();
}

}  // namespace dynatrain::comm::detail
