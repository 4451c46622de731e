// The one small transport interface that the engine (exec/), the elastic device manager (edm/)
// and the trainer (train/) talk through. Backends live in subfolders:
//   comm/mpi/      real processes under mpirun (Open MPI, MPI_THREAD_MULTIPLE)
//   comm/inproc/   ranks as threads of one process, for unit tests
//   comm/c10d/     processes (torchrun, `dynatrain launch`) over a c10d Gloo process group
//   comm/nccl/     (later) device buffers; `Buffer` pointers are then device pointers and the
//                  backend orders work on its own stream. Exact values travel as bytes
//                  (all_gather_bytes, all_to_all, broadcast); floats only where they are added.
//
// Contract:
//  * A Transport is one communicator: ranks 0..size()-1. Point-to-point calls take peer ranks
//    of this communicator; tags must be in [0, kMaxTag].
//  * Non-blocking calls return a Request; the buffer must stay valid and untouched until
//    wait() returns (or test() returned true). A Request destroyed before completion waits.
//  * Collectives (barrier, broadcast, all_reduce_sum, all_gather, reduce_scatter_sum,
//    all_to_all, split) must be called by every rank of the communicator in the same order.
//  * Message sizes must match: a receive (irecv, sendrecv, all_to_all) of N bytes must meet a
//    send of exactly N bytes. Both backends report a mismatch as CommError on the receive.
//  * Matching is by (source, tag) and, among messages with the same source and tag, by posting
//    order (MPI's non-overtaking rule). Collectives never match user point-to-point messages.
//  * Point-to-point calls and wait()/test() may be issued concurrently from several threads of one
//    rank; collectives and split() on one communicator must not run concurrently with each other.
//  * Send and receive buffers of one call must not overlap (all_reduce_sum is in place).
//  * Invalid arguments (peer or root out of range, tag outside [0, kMaxTag], count vectors of
//    the wrong length) are caller bugs: InvariantError, thrown before anything is sent.
//  * Failures throw CommError; the communicator is then unusable and must be rebuilt.
//  * Scattered messages (isend_runs / irecv_runs): the message is the bytes of a list of runs
//    of one buffer, in list order. A runs send must meet a runs receive (never a plain one) of
//    the same total; the two sides' run lists are independent (any split of the same bytes).
//    Whether a pair moves them straight from runs to runs is runs_direct(peer), the same
//    answer on both ranks of the pair.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <memory>
#include <string>
#include <vector>

namespace dynatrain::comm {

inline constexpr int kMaxTag = 32767;

// One run of a scattered message: `bytes` bytes at byte `offset` of the message's buffer.
struct ByteRun {
  std::size_t offset = 0, bytes = 0;
};

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the operation completed; throws CommError if it failed (the error is reported
  // once; later calls return at once).
  virtual void wait() = 0;
  // True once the operation completed; never blocks.
  virtual bool test() = 0;
};

// Waits for every request in order. If some wait throws, the remaining requests are still waited
// for (so no buffer is left in use) and the first error is rethrown.
void wait_all(std::vector<std::unique_ptr<Request>>& requests);

// Total bytes of a run list.
std::size_t runs_bytes(const std::vector<ByteRun>& runs);
// Copies the bytes of runs `from` (of buffer `src`) into runs `to` (of buffer `dst`), in order,
// whatever the split of either list; both must total the same bytes (checked by the caller).
void copy_runs(const std::byte* src, const std::vector<ByteRun>& from, std::byte* dst, const std::vector<ByteRun>& to);

// Backends' shared argument check for Transport::all_to_all: every vector has `size` entries.
void check_all_to_all_args(int size, const std::vector<std::size_t>& send_counts,
                           const std::vector<std::size_t>& send_offsets, const std::vector<std::size_t>& recv_counts,
                           const std::vector<std::size_t>& recv_offsets);

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Short human-readable backend name: "mpi", "inproc", ...
  virtual const char* backend() const = 0;
  // The node (host) rank `rank` of this communicator runs on: ranks with equal values share a
  // node (its memory and its links), others talk over the network. The same answer on every
  // rank. The default: every rank on one node.
  virtual int node_of(int rank) const {
    (void)rank;
    return 0;
  }

  // ---- point to point on raw bytes ----
  virtual std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) = 0;
  // Sends to `dst` and receives from `src` at once; cannot deadlock against the matching call.
  virtual void sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf, std::size_t recv_bytes,
                        int src, int tag) = 0;

  // ---- point to point on scattered bytes (runs of one buffer) ----
  // True when runs to `peer` travel straight from the sender's runs into the receiver's runs
  // (one copy, no staging); symmetric: `peer` answers the same for this rank. False: the
  // default implementation below packs into a temporary buffer and unpacks after the receive
  // (two copies more), which is correct but no faster than the caller packing itself.
  virtual bool runs_direct(int peer) const {
    (void)peer;
    return false;
  }
  // `runs` (in message order) must not overlap; `base` and every run stay valid until wait().
  virtual std::unique_ptr<Request> isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag);
  virtual std::unique_ptr<Request> irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag);

  // ---- collectives over the whole communicator ----
  virtual void barrier() = 0;
  virtual void broadcast(void* buf, std::size_t bytes, int root) = 0;
  // In place: buf[i] = sum over ranks of buf[i].
  virtual void all_reduce_sum(float* buf, std::size_t count) = 0;
  // recv holds size() * count_per_rank floats afterwards, rank r's contribution at r*count.
  virtual void all_gather(const float* send, float* recv, std::size_t count_per_rank) = 0;
  // Exact values: recv holds size() * bytes_per_rank bytes afterwards, rank r's at
  // r * bytes_per_rank. Both backends move bytes; the default (for other backends) goes
  // through all_gather, whose floats are moved, never added.
  virtual void all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank);
  // send holds size() * count_per_rank floats; recv gets the sum of everybody's block rank().
  virtual void reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) = 0;
  // Personalised exchange of bytes: send_counts[r] bytes at send_offsets[r] go to rank r.
  virtual void all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                          const std::vector<std::size_t>& send_offsets, void* recv,
                          const std::vector<std::size_t>& recv_counts,
                          const std::vector<std::size_t>& recv_offsets) = 0;

  // Collective: ranks with the same color form a new communicator ordered by (key, rank).
  // color < 0 means "no communicator" and returns nullptr on that rank.
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;
};

// Collective: every rank's `value`, bit-exact, indexed by rank. all_gather only moves bytes, so
// any trivially copyable value travels through it unchanged (uint64 counters, doubles).
template <typename T>
std::vector<T> all_gather_values(Transport& transport, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_values moves raw bytes");
  std::vector<T> out(static_cast<std::size_t>(transport.size()));
  transport.all_gather_bytes(&value, out.data(), sizeof(T));
  return out;
}

// Collective: every rank's `values` (the same length on every rank), rank r's at r * size().
template <typename T>
std::vector<T> all_gather_values(Transport& transport, const std::vector<T>& values) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_values moves raw bytes");
  std::vector<T> out(values.size() * static_cast<std::size_t>(transport.size()));
  if (!values.empty()) transport.all_gather_bytes(values.data(), out.data(), values.size() * sizeof(T));
  return out;
}

// Collective: rank 0's `ok` on every rank (one broadcast). For checks only rank 0 can make,
// such as opening an output file, so that every rank throws the same error instead of rank 0
// alone leaving its peers waiting in the next collective.
bool agree_with_root(Transport& transport, bool ok);

// Collective: rank 0's `text` (any bytes) on every rank, replacing the others' (two broadcasts:
// length, then bytes).
void broadcast_string(Transport& transport, std::string& text);

// Collective: every rank's `mine` (any bytes, any length per rank) on every rank, indexed by rank.
std::vector<std::string> all_gather_strings(Transport& transport, const std::string& mine);

}  // namespace dynatrain::comm
