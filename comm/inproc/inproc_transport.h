// In-process transport: the ranks of a world are threads of one process sharing one mailbox.
// Meant for unit tests of everything above comm/ (no mpirun needed).
//
// Semantics (kept as strict as MPI so that code passing here does not deadlock under MPI):
//  * Rendezvous, no buffering: isend() and irecv() only post; the operation completes when the
//    matching partner has been posted and the bytes were copied straight from the send buffer to
//    the receive buffer (whichever side is posted second does the copy). A blocking pattern that
//    relies on MPI's eager buffering (both ranks send first, then receive) deadlocks here too, and
//    is reported as a timeout instead of hanging.
//  * Matching by (communicator, source, destination, tag), FIFO among equal keys. Collectives use
//    a separate channel, so they never match user messages.
//  * Collectives are built on that point-to-point layer. Reductions add in rank order
//    (rank 0 + rank 1 + ...), so every rank gets bit-identical results run to run.
//  * Every blocking wait gives up after InprocOptions::wait_timeout with CommError ("deadlock?").
//  * InprocWorld::abort() (run_ranks calls it when a rank throws) wakes every blocked call in the
//    world, which then throws CommError; the other ranks' threads can then finish.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm {

namespace detail {
struct InprocState;
}

struct InprocOptions {
  // A wait()/blocking call that makes no progress for this long throws CommError.
  std::chrono::milliseconds wait_timeout{std::chrono::seconds(120)};
  // Ranks per emulated node (node_of(r) = r / ranks_per_node of the world); 0: one node. Only
  // what node_of() answers changes: every message still moves in memory.
  int ranks_per_node = 0;
};

// One rank's view of one communicator. Created by InprocWorld (world) or by split().
class InprocTransport final : public Transport {
 public:
  // `nodes[r]`: the node of rank r of this communicator (node_of); empty: one node.
  InprocTransport(std::shared_ptr<detail::InprocState> state, std::uint64_t comm_id, int rank, int size,
                  std::vector<int> nodes = {});
  ~InprocTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "inproc"; }
  int node_of(int rank) const override;

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  void sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf, std::size_t recv_bytes, int src,
                int tag) override;
  // Runs are copied straight from the sender's runs into the receiver's (one memcpy per
  // overlap of two runs); a runs message meeting a plain one is a CommError, as under MPI.
  bool runs_direct(int) const override { return true; }
  std::unique_ptr<Request> isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag) override;
  std::unique_ptr<Request> irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag) override;

  void barrier() override;
  void broadcast(void* buf, std::size_t bytes, int root) override;
  void all_reduce_sum(float* buf, std::size_t count) override;
  void all_gather(const float* send, float* recv, std::size_t count_per_rank) override;
  void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) override {
    allgather_bytes(send, recv, bytes_per_rank);
  }
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) override;
  void all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                  const std::vector<std::size_t>& send_offsets, void* recv, const std::vector<std::size_t>& recv_counts,
                  const std::vector<std::size_t>& recv_offsets) override;
  std::unique_ptr<Transport> split(int color, int key) override;

 private:
  // channel 0: user point to point; channel 1: collectives.
  std::unique_ptr<Request> post(bool is_send, const void* send_buf, void* recv_buf, std::size_t bytes, int peer,
                                int tag, int channel, std::vector<ByteRun>* runs = nullptr);
  void allgather_bytes(const void* send, void* recv, std::size_t bytes_per_rank);

  std::shared_ptr<detail::InprocState> state_;
  std::uint64_t comm_id_;
  int rank_;
  int size_;
  std::uint64_t split_seq_ = 0;  // number of split() calls so far; equal on every rank
  std::vector<int> nodes_;       // per rank of this communicator (InprocOptions::ranks_per_node)
};

// N ranks sharing one mailbox. transport(r) is rank r's world communicator; hand each to its own
// thread. The world must outlive every transport split from it only as long as they are used
// (split transports keep the shared state alive themselves).
class InprocWorld {
 public:
  explicit InprocWorld(int size, InprocOptions options = {});
  ~InprocWorld();
  InprocWorld(const InprocWorld&) = delete;
  InprocWorld& operator=(const InprocWorld&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  Transport& transport(int rank);

  // Makes every blocked and every future call in this world (all communicators) throw CommError
  // carrying `reason`. Idempotent; the first reason is kept.
  void abort(const std::string& reason);

 private:
  std::shared_ptr<detail::InprocState> state_;
  std::vector<std::unique_ptr<InprocTransport>> ranks_;
};

// Runs body(rank's world transport) on n threads, joins them and rethrows the first exception
// thrown by any rank (the world is aborted at that moment so the other ranks cannot hang).
void run_ranks(int n, std::function<void(Transport&)> body, InprocOptions options = {});

}  // namespace dynatrain::comm
