// MpiTransport's point to point: plain messages on the user communicator, and the entry of
// scattered (runs) messages, which go by the runs protocol (mpi_runs.h) where runs_direct(peer)
// and by Transport's packing default elsewhere.
//
// Invariants:
//  * Peer and tag are checked (InvariantError) before anything is posted.
//  * A message is one MPI message whatever its size (ByteType), so (source, tag) matching and
//    FIFO order are MPI's; every completed receive has its size checked (check_received).
//  * A request's error string names rank, operation, peer, tag and bytes; a request destroyed
//    unfinished waits for it (errors swallowed), unless MPI was finalised.
#include <mpi.h>

#include <string>
#include <utility>

#include "comm/mpi/mpi_byte_type.h"
#include "comm/mpi/mpi_error.h"
#include "comm/mpi/mpi_runs.h"
#include "comm/mpi/mpi_transport.h"
#include "common/error.h"

namespace dynatrain::comm {

using namespace mpi_detail;

namespace {

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, ByteType type, bool is_recv, std::size_t bytes, std::string where)
      : request_(request), type_(std::move(type)), is_recv_(is_recv), bytes_(bytes), where_(std::move(where)) {}

  ~MpiRequest() override {
    if (!done_ && !mpi_finalized()) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  void wait() override {
    if (done_) return;
    MPI_Status status;
    const int rc = MPI_Wait(&request_, &status);
    finish(rc, status);
  }

  bool test() override {
    if (done_) return true;
    MPI_Status status;
    int flag = 0;
    const int rc = MPI_Test(&request_, &flag, &status);
    if (rc != MPI_SUCCESS || flag) finish(rc, status);  // throws if the operation failed
    return flag != 0;
  }

 private:
  void finish(int rc, const MPI_Status& status) {
    done_ = true;
    request_ = MPI_REQUEST_NULL;
    if (rc != MPI_SUCCESS) {
      type_.release();
      throw_mpi(rc, concat(where_, " (wait)"));
    }
    if (is_recv_) {
      try {
        check_received(status, type_, bytes_, where_);
      } catch (...) {
        type_.release();
        throw;
      }
    }
    type_.release();
  }

  MPI_Request request_;
  ByteType type_;
  bool is_recv_;
  std::size_t bytes_;
  std::string where_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<Request> MpiTransport::post(bool is_send, void* buf, std::size_t bytes, int peer, int tag,
                                            MPI_Comm comm, const char* what) {
  std::string where = concat("rank ", rank_, "/", size_, ": ", what, is_send ? " to " : " from ", peer, " (tag ", tag,
                             ", ", bytes, " bytes)");
  ByteType type(bytes, max_chunk_bytes(), where);
  MPI_Request request = MPI_REQUEST_NULL;
  if (is_send) {
    DT_MPI(MPI_Isend(buf, type.count(), type.type(), peer, tag, comm, &request), where, ": MPI_Isend");
  } else {
    DT_MPI(MPI_Irecv(buf, type.count(), type.type(), peer, tag, comm, &request), where, ": MPI_Irecv");
  }
  return std::make_unique<MpiRequest>(request, std::move(type), !is_send, bytes, std::move(where));
}

std::unique_ptr<Request> MpiTransport::isend(const void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, size_, "isend: destination");
  check_tag(tag);
  return post(true, const_cast<void*>(buf), bytes, peer, tag, comm_, "isend");
}

std::unique_ptr<Request> MpiTransport::irecv(void* buf, std::size_t bytes, int peer, int tag) {
  check_peer(peer, size_, "irecv: source");
  check_tag(tag);
  return post(false, buf, bytes, peer, tag, comm_, "irecv");
}

void MpiTransport::sendrecv(const void* send_buf, std::size_t send_bytes, int dst, void* recv_buf,
                            std::size_t recv_bytes, int src, int tag) {
  check_peer(dst, size_, "sendrecv: destination");
  check_peer(src, size_, "sendrecv: source");
  check_tag(tag);
  const std::string where = concat("rank ", rank_, "/", size_, ": sendrecv (", send_bytes, " bytes to ", dst, ", ",
                                   recv_bytes, " bytes from ", src, ", tag ", tag, ")");
  const ByteType send_type(send_bytes, max_chunk_bytes(), where);
  const ByteType recv_type(recv_bytes, max_chunk_bytes(), where);
  MPI_Status status;
  DT_MPI(MPI_Sendrecv(send_buf, send_type.count(), send_type.type(), dst, tag, recv_buf, recv_type.count(),
                      recv_type.type(), src, tag, comm_, &status),
         where, ": MPI_Sendrecv");
  check_received(status, recv_type, recv_bytes, where);
}

bool MpiTransport::runs_direct(int peer) const {
  return peer >= 0 && peer < size_ && runs_direct_[static_cast<std::size_t>(peer)] != 0;
}

std::unique_ptr<Request> MpiTransport::isend_runs(const void* base, std::vector<ByteRun> runs, int peer, int tag) {
  check_peer(peer, size_, "isend_runs: destination");
  check_tag(tag);
  if (!runs_direct(peer)) return Transport::isend_runs(base, std::move(runs), peer, tag);
  return post_runs_send(base, runs, peer, tag, runs_comm_, runs_progress_,
                        concat("rank ", rank_, "/", size_, ": isend_runs to ", peer, " (tag ", tag, ", ", runs.size(),
                               " runs, ", runs_bytes(runs), " bytes)"));
}

std::unique_ptr<Request> MpiTransport::irecv_runs(void* base, std::vector<ByteRun> runs, int peer, int tag) {
  check_peer(peer, size_, "irecv_runs: source");
  check_tag(tag);
  if (!runs_direct(peer)) return Transport::irecv_runs(base, std::move(runs), peer, tag);
  std::string where = concat("rank ", rank_, "/", size_, ": irecv_runs from ", peer, " (tag ", tag, ", ", runs.size(),
                             " runs, ", runs_bytes(runs), " bytes)");
  return post_runs_recv(base, std::move(runs), peer, tag, runs_comm_, runs_progress_, std::move(where));
}

}  // namespace dynatrain::comm
