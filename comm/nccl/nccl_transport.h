// NcclTransport: the Transport interface (comm/transport.h) over NCCL, for state in device memory
// (exec/cuda/). No CUDA or NCCL header here: users need only this file.
//
//   bootstrap     NcclTransport::over(host): rank 0's ncclUniqueId travels by one broadcast over
//                 an existing host transport (MPI, c10d, in-process), then ncclCommInitRank; the
//                 ranks are the host transport's, node_of() its answers.
//   buffers       device (or managed) pointers move as they are; host pointers are staged
//                 through device memory of the transport's own, so the engine's small host-side
//                 collectives (its agreements: all_gather_bytes, broadcast) work unchanged.
//   ordering      all work goes on one CUDA stream (NcclOptions::stream: pass exec/cuda's
//                 CudaMemory::stream() so that packs, transfers and unpacks follow each other
//                 without a host synchronisation); wait() / collectives return once the stream
//                 has finished the operation.
//   point to point  isend / irecv are queued and launched together, in one ncclGroupStart / End,
//                 at the next wait(), test(), sendrecv or collective: a rank's sends and
//                 receives of one exchange (the engine's XOR pair round) are one group, so two
//                 ranks that send to each other first cannot deadlock. Messages to one peer are
//                 matched in posting order (NCCL has no tags).
//
// What the interface asks and NCCL cannot give (documented, never silently wrong where it can be
// checked):
//   * tags select nothing: a receive meets the next message from that peer whatever its tag
//     (tags are still range-checked). The engine posts both sides in one order, so it agrees.
//   * a size mismatch between a send and its receive is not detected (NCCL reports none).
//   * scattered messages (isend_runs / irecv_runs) are refused with InputError naming the call;
//     runs_direct() is false, so the engine packs instead and never calls them.
// Failures of NCCL or CUDA throw CommError naming the call; the communicator is then unusable.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm {

struct NcclOptions {
  int device = 0;          // the CUDA device of this rank
  void* stream = nullptr;  // cudaStream_t to order all work on; nullptr: a stream of its own
};

namespace detail {
struct NcclComm;  // nccl_transport.cc: the ncclComm_t, stream and pending operations
}  // namespace detail

class NcclTransport final : public Transport {
 public:
  // Collective over `host` (every rank calls it): one NCCL communicator of host's ranks on
  // `options.device`. Throws InputError for a device this process does not have, CommError when
  // CUDA or NCCL fail.
  static std::unique_ptr<NcclTransport> over(Transport& host, const NcclOptions& options = {});
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  int node_of(int rank) const override;

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  void sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf, std::size_t recv_bytes, int src,
                int tag) override;
  // Refused: InputError (see above).
  std::unique_ptr<Request> isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag) override;
  std::unique_ptr<Request> irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag) override;

  void barrier() override;
  void broadcast(void* buf, std::size_t bytes, int root) override;
  void all_reduce_sum(float* buf, std::size_t count) override;
  void all_gather(const float* send, float* recv, std::size_t count_per_rank) override;
  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) override;
  void all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                  const std::vector<std::size_t>& send_offsets, void* recv, const std::vector<std::size_t>& recv_counts,
                  const std::vector<std::size_t>& recv_offsets) override;
  // ncclCommSplit; the child orders its work on the same stream.
  std::unique_ptr<Transport> split(int color, int key) override;

  // The cudaStream_t all work is ordered on.
  void* stream() const;

 private:
  NcclTransport(std::shared_ptr<detail::NcclComm> comm, std::vector<int> node_of);
  void check_peer(int peer, int tag) const;

  std::shared_ptr<detail::NcclComm> comm_;
  std::vector<int> node_of_;
  int rank_ = 0, size_ = 0;
};

}  // namespace dynatrain::comm
