#include "comm/mpi/mpi_transport.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace dynatrain::comm {

namespace {

using ::dynatrain::detail::concat;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(len));
}

[[noreturn]] void throw_mpi(int code, const std::string& what) {
  throw CommError(
      concat("mpi: ", what, " failed: ", mpi_error_string(code), " (MPI error ", code, ")"));
}

// Calls an MPI function; on failure throws CommError naming the operation. The context parts are
// only formatted on failure.
#define DT_MPI(call, ...)                                                      \
  do {                                                                         \
    const int dt_mpi_rc_ = (call);                                             \
    if (dt_mpi_rc_ != MPI_SUCCESS) throw_mpi(dt_mpi_rc_, concat(__VA_ARGS__)); \
  } while (0)

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// How `bytes` bytes are described to MPI: `count` elements of `type`. Small messages are plain
// MPI_BYTE; larger ones one element of a derived type, n contiguous blocks of `chunk` bytes plus
// a remainder. The type signature is `bytes` x MPI_BYTE either way, so the two sides may chunk
// differently and still match.
class ByteType {
 public:
  ByteType(std::size_t bytes, std::size_t max_chunk, const std::string& where) {
    if (bytes <= max_chunk) {
      count_ = static_cast<int>(bytes);
      return;
    }
    // Keep the block count an int too, whatever the chunk setting.
    const std::size_t chunk = std::max(max_chunk, (bytes + INT_MAX - 1) / INT_MAX);
    const std::size_t blocks = bytes / chunk;
    const std::size_t rest = bytes % chunk;
    MPI_Datatype block = MPI_DATATYPE_NULL;
    MPI_Datatype body = MPI_DATATYPE_NULL;
    DT_MPI(MPI_Type_contiguous(static_cast<int>(chunk), MPI_BYTE, &block), where,
           ": MPI_Type_contiguous(", chunk, " bytes)");
    const int rc_body = MPI_Type_contiguous(static_cast<int>(blocks), block, &body);
    MPI_Type_free(&block);
    if (rc_body != MPI_SUCCESS)
      throw_mpi(rc_body, concat(where, ": MPI_Type_contiguous(", blocks, " blocks)"));
    if (rest == 0) {
      type_ = body;
    } else {
      int lengths[2] = {1, static_cast<int>(rest)};
      MPI_Aint displacements[2] = {0, static_cast<MPI_Aint>(blocks * chunk)};
      MPI_Datatype types[2] = {body, MPI_BYTE};
      const int rc = MPI_Type_create_struct(2, lengths, displacements, types, &type_);
      MPI_Type_free(&body);
      if (rc != MPI_SUCCESS) throw_mpi(rc, concat(where, ": MPI_Type_create_struct"));
    }
    const int rc = MPI_Type_commit(&type_);
    if (rc != MPI_SUCCESS) {
      MPI_Type_free(&type_);
      throw_mpi(rc, concat(where, ": MPI_Type_commit"));
    }
    count_ = 1;
    derived_ = true;
  }
  ~ByteType() { release(); }
  ByteType(ByteType&& other) noexcept
      : type_(std::exchange(other.type_, MPI_BYTE)),
        count_(other.count_),
        derived_(std::exchange(other.derived_, false)) {}
  ByteType& operator=(ByteType&&) = delete;

  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }
  void release() {
    if (derived_ && !mpi_finalized()) MPI_Type_free(&type_);
    derived_ = false;
    type_ = MPI_BYTE;
  }

 private:
  MPI_Datatype type_ = MPI_BYTE;
  int count_ = 0;
  bool derived_ = false;
};

// Bytes a completed receive delivered, checked against what the caller asked for.
void check_received(const MPI_Status& status, const ByteType& type, std::size_t expected,
                    const std::string& where) {
  MPI_Count got = 0;
  DT_MPI(MPI_Get_elements_x(&status, type.type(), &got), where, ": MPI_Get_elements_x");
  if (got == MPI_UNDEFINED || static_cast<std::size_t>(got) != expected) {
    throw CommError(concat("mpi: ", where, ": message size mismatch: received ", got,
                           " bytes, expected ", expected));
  }
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, ByteType type, bool is_recv, std::size_t bytes, std::string where)
      : request_(request),
        type_(std::move(type)),
        is_recv_(is_recv),
        bytes_(bytes),
        where_(std::move(where)) {}

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

void check_peer(int peer, int size, const char* what) {
  DT_CHECK(peer >= 0 && peer < size, what, " rank ", peer, " is outside [0, ", size, ")");
}

void check_tag(int tag) {
  DT_CHECK(tag >= 0 && tag <= kMaxTag, "tag ", tag, " is outside [0, ", kMaxTag, "]");
}

std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MpiSession

bool MpiSession::init(int* argc, char*** argv) {
  std::lock_guard lock(init_mutex());
  if (mpi_finalized()) throw CommError("mpi: MPI_Init_thread: MPI was already finalised");
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool did_init = false;
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) throw_mpi(rc, "MPI_Init_thread(MPI_THREAD_MULTIPLE)");
    did_init = true;
  } else {
    DT_MPI(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  DT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
         "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  DT_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN),
         "MPI_Comm_set_errhandler(MPI_COMM_SELF)");
  if (provided < MPI_THREAD_MULTIPLE) {
    throw CommError(concat("mpi: the MPI library provides thread level ", provided,
                           " but DynaTrain needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                           "); use an MPI build with thread support"));
  }
  return did_init;
}

MpiSession::MpiSession(int* argc, char*** argv) : owner_(init(argc, argv)) {}

MpiSession::~MpiSession() {
  std::lock_guard lock(init_mutex());
  if (owner_ && !mpi_finalized()) MPI_Finalize();
}

// ---------------------------------------------------------------------------------------------
// MpiTransport

MpiTransport::MpiTransport(MPI_Comm comm, std::size_t max_chunk_bytes)
    : comm_(comm), max_chunk_(max_chunk_bytes) {
  try {
    DT_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    DT_MPI(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    DT_MPI(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    DT_MPI(MPI_Comm_dup(comm_, &coll_comm_), "rank ", rank_, ": MPI_Comm_dup (collectives)");
    DT_MPI(MPI_Comm_set_errhandler(coll_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  } catch (...) {
    if (coll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&coll_comm_);
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiTransport::~MpiTransport() {
  if (mpi_finalized()) return;
  if (coll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&coll_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiTransport> MpiTransport::world() { return from_comm(MPI_COMM_WORLD); }

std::unique_ptr<MpiTransport> MpiTransport::from_comm(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || mpi_finalized()) {
    throw CommError("mpi: MPI is not initialised; construct an MpiSession first");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::unique_ptr<MpiTransport>(new MpiTransport(dup, kDefaultMaxChunkBytes));
}

void MpiTransport::set_max_chunk_bytes(std::size_t bytes) {
  DT_CHECK(bytes >= 1 && bytes <= static_cast<std::size_t>(INT_MAX),
           "max chunk must be in [1, INT_MAX], got ", bytes);
  max_chunk_.store(bytes, std::memory_order_relaxed);
}

std::unique_ptr<Request> MpiTransport::post(bool is_send, void* buf, std::size_t bytes, int peer,
                                            int tag, MPI_Comm comm, const char* what) {
  std::string where = concat("rank ", rank_, "/", size_, ": ", what, is_send ? " to " : " from ",
                             peer, " (tag ", tag, ", ", bytes, " bytes)");
  ByteType type(bytes, max_chunk_bytes(), where);
  MPI_Request request = MPI_REQUEST_NULL;
  if (is_send) {
    DT_MPI(MPI_Isend(buf, type.count(), type.type(), peer, tag, comm, &request), where,
           ": MPI_Isend");
  } else {
    DT_MPI(MPI_Irecv(buf, type.count(), type.type(), peer, tag, comm, &request), where,
           ": MPI_Irecv");
  }
  return std::make_unique<MpiRequest>(request, std::move(type), !is_send, bytes, std::move(where));
}

std::unique_ptr<Request> MpiTransport::isend(const void* buf, std::size_t bytes, int peer,
                                             int tag) {
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
  const std::string where =
      concat("rank ", rank_, "/", size_, ": sendrecv (", send_bytes, " bytes to ", dst, ", ",
             recv_bytes, " bytes from ", src, ", tag ", tag, ")");
  const ByteType send_type(send_bytes, max_chunk_bytes(), where);
  const ByteType recv_type(recv_bytes, max_chunk_bytes(), where);
  MPI_Status status;
  DT_MPI(MPI_Sendrecv(send_buf, send_type.count(), send_type.type(), dst, tag, recv_buf,
                      recv_type.count(), recv_type.type(), src, tag, comm_, &status),
         where, ": MPI_Sendrecv");
  check_received(status, recv_type, recv_bytes, where);
}

// ---- collectives (on coll_comm_) ----

void MpiTransport::barrier() {
  DT_MPI(MPI_Barrier(coll_comm_), "rank ", rank_, "/", size_, ": MPI_Barrier");
}

void MpiTransport::broadcast(void* buf, std::size_t bytes, int root) {
  check_peer(root, size_, "broadcast: root");
  const std::size_t chunk = max_chunk_bytes();
  auto* p = static_cast<unsigned char*>(buf);
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t n = std::min(chunk, bytes - off);
    DT_MPI(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, root, coll_comm_), "rank ", rank_, "/",
           size_, ": MPI_Bcast (", n, " bytes at offset ", off, " of ", bytes, ", root ", root,
           ")");
  }
}

void MpiTransport::all_reduce_sum(float* buf, std::size_t count) {
  const std::size_t chunk = std::max<std::size_t>(1, max_chunk_bytes() / sizeof(float));
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t n = std::min(chunk, count - off);
    DT_MPI(
        MPI_Allreduce(MPI_IN_PLACE, buf + off, static_cast<int>(n), MPI_FLOAT, MPI_SUM, coll_comm_),
        "rank ", rank_, "/", size_, ": MPI_Allreduce (", n, " floats at offset ", off, " of ",
        count, ")");
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
    DT_MPI(MPI_Allgather(send, static_cast<int>(count), MPI_BYTE, recv, static_cast<int>(count),
                         MPI_BYTE, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Allgather (", count, " bytes per rank)");
    return;
  }
  // Chunked: gather a slice of every rank's block into staging, then scatter it into place.
  const std::size_t step = std::max<std::size_t>(1, chunk / ranks);
  std::vector<unsigned char> staging(std::min(step, count) * ranks);
  for (std::size_t off = 0; off < count; off += step) {
    const std::size_t n = std::min(step, count - off);
    DT_MPI(MPI_Allgather(send + off, static_cast<int>(n), MPI_BYTE, staging.data(),
                         static_cast<int>(n), MPI_BYTE, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Allgather (", n, " bytes at offset ", off, " of ",
           count, " per rank)");
    for (std::size_t r = 0; r < ranks; ++r) std::memcpy(recv + r * count + off, staging.data() + r * n, n);
  }
}

void MpiTransport::reduce_scatter_sum(const float* send, float* recv, std::size_t count_per_rank) {
  const std::size_t count = count_per_rank;
  const auto ranks = static_cast<std::size_t>(size_);
  const std::size_t chunk = max_chunk_bytes();
  if (count * ranks * sizeof(float) <= chunk) {
    DT_MPI(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                    coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Reduce_scatter_block (", count, " floats per rank)");
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
    DT_MPI(MPI_Reduce_scatter_block(staging.data(), recv + off, static_cast<int>(n), MPI_FLOAT,
                                    MPI_SUM, coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Reduce_scatter_block (", n, " floats at offset ", off,
           " of ", count, " per rank)");
  }
}

void MpiTransport::all_to_all(const void* send, const std::vector<std::size_t>& send_counts,
                              const std::vector<std::size_t>& send_offsets, void* recv,
                              const std::vector<std::size_t>& recv_counts,
                              const std::vector<std::size_t>& recv_offsets) {
  const auto n = static_cast<std::size_t>(size_);
  check_all_to_all_args(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  const std::size_t chunk = max_chunk_bytes();
  const auto fits = [&](const std::vector<std::size_t>& counts,
                        const std::vector<std::size_t>& offsets) {
    for (std::size_t r = 0; r < n; ++r) {
      if (counts[r] > chunk || offsets[r] > static_cast<std::size_t>(INT_MAX)) return false;
    }
    return true;
  };
  // The choice must be the same on every rank, so agree on it (one tiny allreduce).
  int small = fits(send_counts, send_offsets) && fits(recv_counts, recv_offsets) ? 1 : 0;
  DT_MPI(MPI_Allreduce(MPI_IN_PLACE, &small, 1, MPI_INT, MPI_MIN, coll_comm_), "rank ", rank_, "/",
         size_, ": MPI_Allreduce (all_to_all path choice)");
  if (small) {
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (std::size_t r = 0; r < n; ++r) {
      sc[r] = static_cast<int>(send_counts[r]);
      sd[r] = static_cast<int>(send_offsets[r]);
      rc[r] = static_cast<int>(recv_counts[r]);
      rd[r] = static_cast<int>(recv_offsets[r]);
    }
    DT_MPI(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE,
                         coll_comm_),
           "rank ", rank_, "/", size_, ": MPI_Alltoallv");
    return;
  }
  // Large: one (possibly derived-type) message per pair on the collective communicator.
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  std::vector<std::unique_ptr<Request>> requests;
  for (int r = 0; r < size_; ++r) {
    requests.push_back(
        post(false, out + recv_offsets[r], recv_counts[r], r, 0, coll_comm_, "all_to_all recv"));
  }
  for (int r = 0; r < size_; ++r) {
    requests.push_back(post(true, const_cast<unsigned char*>(in) + send_offsets[r], send_counts[r],
                            r, 0, coll_comm_, "all_to_all send"));
  }
  wait_all(requests);
}

std::unique_ptr<Transport> MpiTransport::split(int color, int key) {
  MPI_Comm child = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_split(coll_comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "rank ", rank_,
         "/", size_, ": MPI_Comm_split (color ", color, ", key ", key, ")");
  if (child == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<MpiTransport>(new MpiTransport(child, max_chunk_bytes()));
}

}  // namespace dynatrain::comm
