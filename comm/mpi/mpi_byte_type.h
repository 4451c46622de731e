// How a byte count is described to MPI, and the check of what a receive delivered.
//
// Invariants:
//  * ByteType(bytes, chunk) describes exactly `bytes` x MPI_BYTE: up to `chunk` bytes as that
//    many MPI_BYTE, more as ONE element of a derived type (n contiguous blocks + a remainder), so
//    the two sides of a message may chunk differently and still match, and a >2 GiB message
//    stays one message (matching and ordering unchanged). Every count handed to MPI is an int.
//  * A derived type is freed exactly once: by release(), the destructor, or never after
//    MPI_Finalize.
//  * check_received throws CommError when a receive delivered fewer or more bytes than asked
//    (MPI itself reports only the "more" case).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

namespace dynatrain::comm::mpi_detail {

// How `bytes` bytes are described to MPI: `count` elements of `type`. Small messages are plain
// MPI_BYTE; larger ones one element of a derived type, n contiguous blocks of `chunk` bytes plus
// a remainder. The type signature is `bytes` x MPI_BYTE either way, so the two sides may chunk
// differently and still match.
class ByteType {
 public:
  ByteType(std::size_t bytes, std::size_t max_chunk, const std::string& where);
  ~ByteType() { release(); }
  ByteType(ByteType&& other) noexcept;
  ByteType& operator=(ByteType&&) = delete;

  MPI_Datatype type() const { return type_; }
  int count() const { return count_; }
  void release();

 private:
  MPI_Datatype type_ = MPI_BYTE;
  int count_ = 0;
  bool derived_ = false;
};

// Bytes a completed receive delivered, checked against what the caller asked for.
void check_received(const MPI_Status& status, const ByteType& type, std::size_t expected, const std::string& where);

}  // namespace dynatrain::comm::mpi_detail
