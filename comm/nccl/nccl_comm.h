// Internals of comm/nccl (not for users): the NCCL communicator with its stream, the queue of
// point-to-point operations launched together as one group, their requests, and the staging of
// host buffers through device memory.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm::detail {

void check_nccl(ncclResult_t r, ncclComm_t comm, const char* what);
void check_cuda_call(cudaError_t e, const char* what);
// True for device and managed memory (what NCCL can move); false for host memory.
bool is_device_pointer(const void* p);

// One posted send or receive. Device memory `dev` is what NCCL moves: the caller's buffer, or
// `scratch` staging a host buffer (sends copy into it when posted, receives copy out of it into
// `host_dst` when finished).
struct P2pOp {
  bool send = false;
  void* dev = nullptr;
  std::size_t bytes = 0;
  int peer = 0;
  void* scratch = nullptr;
  void* host_dst = nullptr;
  std::shared_ptr<cudaEvent_t> done;  // recorded after the group that launched it
  bool finished = false;
};

struct NcclComm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool own_stream = false;
  int device = 0;
  std::shared_ptr<NcclComm> parent;           // a split's parent, kept while the child uses its stream
  std::mutex mu;                              // the queue
  std::vector<std::shared_ptr<P2pOp>> queue;  // posted, not yet launched

  ~NcclComm();
  void use_device() const;
  // Queues a send / receive of `bytes` at `buf` (any memory); returns its request.
  std::unique_ptr<Request> post(const std::shared_ptr<NcclComm>& self, bool send, void* buf, std::size_t bytes,
                                int peer);
  // Launches every queued operation in one ncclGroupStart / ncclGroupEnd, in posting order.
  void flush();
  // Blocks until `op` has finished (flushing first), copies a staged receive out, frees staging.
  void finish(P2pOp& op);
  // Blocks until the stream has done everything enqueued.
  void synchronize();
};

// Device views of a blocking collective's buffers: device pointers as they are, host ones
// through device scratch (copied in before, out by finish()). `recv` may equal `send` (in place).
class Staged {
 public:
  Staged(NcclComm& c, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes);
  ~Staged();
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  const void* send() const { return send_; }
  void* recv() const { return recv_; }
  // Waits for the stream, copies a staged result into the caller's host buffer.
  void finish();

 private:
  NcclComm& c_;
  const void* send_ = nullptr;
  void* recv_ = nullptr;
  void* host_recv_ = nullptr;
  std::size_t recv_bytes_ = 0;
  std::vector<void*> scratch_;
};

}  // namespace dynatrain::comm::detail
