// Open MPI backend of comm::Transport: ranks are processes started by mpirun.
//
//   MpiSession session(&argc, &argv);        // MPI_Init_thread(MPI_THREAD_MULTIPLE) ... Finalize
//   auto world = MpiTransport::world();      // a duplicate of MPI_COMM_WORLD
//   auto row = world->split(world->rank() / 4, world->rank());
//
// Facts a caller may rely on:
//  * Every MPI call runs under MPI_ERRORS_RETURN; a non-success code becomes CommError whose
//    message names the rank, the operation with its arguments and MPI's error string.
//  * Tags are passed to MPI unchanged. Collectives run on a second, private duplicate of the
//    communicator, so they never match user point-to-point messages.
//  * No size limit from MPI's int counts: a point-to-point message larger than max_chunk_bytes()
//    travels as ONE message of a derived datatype (n blocks of max_chunk_bytes + a remainder),
//    so matching and ordering are unchanged. Collectives larger than the chunk run as a sequence
//    of chunk-sized collectives. max_chunk_bytes() defaults to 1 GiB; tests lower it to push
//    small messages through the chunked paths.
//  * Received sizes are checked: a receive that gets fewer or more bytes than it asked for
//    throws CommError (MPI itself only reports the "more" case).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::comm {

namespace detail {
struct RunsProgress;
}

// Owns the MPI library's lifetime for one program: construct one at the top of main().
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  MpiSession() : MpiSession(nullptr, nullptr) {}
  // Finalises MPI if this object initialised it (and nobody finalised it already). Destroy every
  // MpiTransport first; transports destroyed after finalisation skip freeing their communicators.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // Idempotent and thread-safe: initialises MPI with MPI_THREAD_MULTIPLE unless it already is,
  // then checks the provided thread level and throws CommError if it is below
  // MPI_THREAD_MULTIPLE (or if MPI was already finalised). Sets MPI_ERRORS_RETURN on
  // MPI_COMM_WORLD and MPI_COMM_SELF. Returns true when this call did the initialisation.
  static bool init(int* argc = nullptr, char*** argv = nullptr);

 private:
  bool owner_;
};

class MpiTransport final : public Transport {
 public:
  static constexpr std::size_t kDefaultMaxChunkBytes = std::size_t{1} << 30;

  // A transport over a duplicate of MPI_COMM_WORLD. Requires MpiSession::init() to have run.
  static std::unique_ptr<MpiTransport> world();
  // A transport over a duplicate of `comm` (the caller keeps and frees its own handle).
  static std::unique_ptr<MpiTransport> from_comm(MPI_Comm comm);

  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  // As Open MPI sees hosts (MPI_COMM_TYPE_SHARED): the lowest rank of the node, found once at
  // construction (probe_runs_direct).
  int node_of(int rank) const override;

  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  void sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf, std::size_t recv_bytes, int src,
                int tag) override;

  // Scattered messages: between processes of one node, straight from runs to runs by
  // cross-memory attach (process_vm_readv, one copy); to other nodes, or when the probe at
  // construction found that attach is not permitted, the packing default of Transport.
  bool runs_direct(int peer) const override;
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
  // Children inherit max_chunk_bytes().
  std::unique_ptr<Transport> split(int color, int key) override;

  // Largest byte count handed to MPI as one count of MPI_BYTE/MPI_FLOAT; 1 <= value <= INT_MAX.
  // Collectives chunk by it, so set the same value on every rank before the next collective.
  void set_max_chunk_bytes(std::size_t bytes);
  std::size_t max_chunk_bytes() const { return max_chunk_.load(std::memory_order_relaxed); }

  // The user-facing communicator (for interop with other MPI code; do not free it).
  MPI_Comm comm() const { return comm_; }

 private:
  // Takes ownership of `comm`.
  MpiTransport(MPI_Comm comm, std::size_t max_chunk_bytes);

  std::unique_ptr<Request> post(bool is_send, void* buf, std::size_t bytes, int peer, int tag, MPI_Comm comm,
                                const char* what);

  MPI_Comm comm_ = MPI_COMM_NULL;                        // user point to point
  MPI_Comm coll_comm_ = MPI_COMM_NULL;                   // collectives (private duplicate)
  MPI_Comm runs_comm_ = MPI_COMM_NULL;                   // the runs protocol's descriptors and answers
  std::vector<char> runs_direct_;                        // per peer: runs go by cross-memory attach
  std::vector<int> node_of_;                             // per rank: the lowest rank on its node
  std::shared_ptr<detail::RunsProgress> runs_progress_;  // posted runs requests (mpi_runs.cc)
  void probe_runs_direct();
  int rank_ = 0;
  int size_ = 0;
  std::atomic<std::size_t> max_chunk_;
};

}  // namespace dynatrain::comm
