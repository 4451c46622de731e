// MpiTransport's collectives, all on the private collective communicator (coll_comm_), so they
// never match user point-to-point messages, and split().
//
// Invariants:
//  * Every count handed to MPI is at most max_chunk_bytes() bytes: larger collectives run as a
//    sequence of chunk-sized ones (all_gather and reduce_scatter through a staging buffer of at
//    most one chunk); every rank must hold the same chunk setting.
//  * all_to_all takes one path on every rank: MPI_Alltoallv when every count and offset fits on
//    every rank (agreed by one MPI_Allreduce), else one message per pair.
//  * split() children inherit max_chunk_bytes(); color < 0 takes no part and gets nullptr.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "comm/mpi/mpi_error.h"
#include "comm/mpi/mpi_transport.h"

namespace dynatrain::comm {

using namespace mpi_detail;

void MpiTransport::barrier() { DT_MPI(MPI_Barrier(coll_comm_), "rank ", rank_, "/", size_, ": MPI_Barrier"); }

void MpiTransport::broadcast(void* buf, std::size_t bytes, int root) {
  check_peer(root, size_, "broadcast: root");
  const std::size_t chunk = max_chunk_bytes();
  auto* p = static_cast<unsigned char*>(buf);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t n = std::min(chunk, bytes - off);
    DT_MPI(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, root, coll_comm_), "rank ", rank_, "/", size_,
           ": MPI_Bcast (", n, " bytes at offset ", off, " of ", bytes, ", root ", root, ")");
  }
}

void MpiTransport::all_reduce_sum(float* buf, std::size_t count) {
  const std::size_t chunk = std::max<std::size_t>(1, max_chunk_bytes() / sizeof(float));
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t n = std::min(chunk, count - off);
    DT_MPI(MPI_Allreduce(MPI_IN_PLACE, buf + off, static_cast<int>(n), MPI_FLOAT, MPI_SUM, coll_comm_), "rank ", rank_,
           "/", size_, ": MPI_Allreduce (", n, " floats at offset ", off, " of ", count, ")");
  }
}

void MpiTransport::all_gather(const float* send, float* recv, std::size_t count_per_rank) {
  all_gather_bytes(send, recv, count_per_rank * sizeof(float));
}

void MpiTransport::all_gather_bytes(const void* send_buf, void* recv_buf, std::size_t bytes_per_rank) {
  const auto* send = static_cast<const unsigned char*>(send_buf);
  auto* recv = static_cast<unsigned char*>(recv_buf);
  const std::size_t count = bytes_per_rank;
  const auto ranks = static_cast<std::size_t>(size_);
  const std::size_t chunk = max_chunk_bytes();
  if (count * ranks <= chunk) {
    DT_MPI(MPI_Allgather(send, static_cast<int>(count), MPI_BYTE, recv, static_cast<int>(count), MPI_BYTE, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Allgather (", count, " bytes per rank)");
    return;
  }
  // Chunked: gather a slice of every rank's block into staging, then scatter it into place.
  const std::size_t step = std::max<std::size_t>(1, chunk / ranks);
  std::vector<unsigned char> staging(std::min(step, count) * ranks);
  for (std::size_t off = 0; off < count; off += step) {
    const std::size_t n = std::min(step, count - off);
    DT_MPI(MPI_Allgather(send + off, static_cast<int>(n), MPI_BYTE, staging.data(), static_cast<int>(n), MPI_BYTE,
                         coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Allgather (", n, " bytes at offset ", off, " of ", count, " per rank)");
    for (std::size_t r = 0; r < ranks; ++r) std::memcpy(recv + r * count + off, staging.data() + r * n, n);
  }
}

void MpiTransport::reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) {
  const std::size_t count = count_per_rank;
  const auto ranks = static_cast<std::size_t>(size_);
  const std::size_t chunk = max_chunk_bytes();
  if (count * ranks * sizeof(float) <= chunk) {
    DT_MPI(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, coll_comm_), "rank ",
           rank_, "/", size_, ": MPI_Reduce_scatter_block (", count, " floats per rank)");
    return;
  }
  // Chunked: pack the same slice of every rank's block side by side, reduce-scatter that.
  const std::size_t step = std::max<std::size_t>(1, chunk / (ranks * sizeof(float)));
  std::vector<float> staging(std::min(step, count) * ranks);
  for (std::size_t off = 0; off < count; off += step) {
    const std::size_t n = std::min(step, count - off);
    for (std::size_t r = 0; r < ranks; ++r) {
      std::memcpy(staging.data() + r * n, send + r * count + off, n * sizeof(float));
    }
    DT_MPI(MPI_Reduce_scatter_block(staging.data(), recv + off, static_cast<int>(n), MPI_FLOAT, MPI_SUM, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Reduce_scatter_block (", n, " floats at offset ", off, " of ", count,
           " per rank)");
  }
}

void MpiTransport::all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                              const std::vector<std::size_t>& send_offsets, void* recv,
                              const std::vector<std::size_t>& recv_counts,
                              const std::vector<std::size_t>& recv_offsets) {
  const auto n = static_cast<std::size_t>(size_);
  check_all_to_all_args(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  const std::size_t chunk = max_chunk_bytes();
  const auto fits = [&](const std::vector<std::size_t>& counts, const std::vector<std::size_t>& offsets) {
    for (std::size_t r = 0; r < n; ++r) {
      if (counts[r] > chunk || offsets[r] > static_cast<std::size_t>(INT_MAX)) return false;
    }
    return true;
  };
  // The choice must be the same on every rank, so agree on it (one tiny allreduce).
  int small = fits(send_counts, send_offsets) && fits(recv_counts, recv_offsets) ? 1 : 0;
  DT_MPI(MPI_Allreduce(MPI_IN_PLACE, &small, 1, MPI_INT, MPI_MIN, coll_comm_), "rank ", rank_, "/", size_,
         ": MPI_Allreduce (all_to_all path choice)");
  if (small) {
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (std::size_t r = 0; r < n; ++r) {
      sc[r] = static_cast<int>(send_counts[r]);
      sd[r] = static_cast<int>(send_offsets[r]);
      rc[r] = static_cast<int>(recv_counts[r]);
      rd[r] = static_cast<int>(recv_offsets[r]);
    }
    DT_MPI(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Alltoallv");
    return;
  }
  // Large: one (possibly derived-type) message per pair on the collective communicator.
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 0; r < size_; ++r) {
    requests.push_back(post(false, out + recv_offsets[r], recv_counts[r], r, 0, coll_comm_, "all_to_all recv"));
  }
  for (int r = 0; r < size_; ++r) {
    requests.push_back(post(true, const_cast<unsigned char*>(in) + send_offsets[r], send_counts[r], r, 0, coll_comm_,
                            "all_to_all send"));
  }
  wait_all(requests);
}

std::unique_ptr<Transport> MpiTransport::split(int color, int key) {
  MPI_Comm child = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_split(coll_comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "rank ", rank_, "/", size_,
         ": MPI_Comm_split (color ", color, ", key ", key, ")");
  if (child == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<MpiTransport>(new MpiTransport(child, max_chunk_bytes()));
}

}  // namespace dynatrain::comm
