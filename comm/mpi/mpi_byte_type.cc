#include "comm/mpi/mpi_byte_type.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "comm/mpi/mpi_error.h"

namespace dynatrain::comm::mpi_detail {

ByteType::ByteType(std::size_t bytes, std::size_t max_chunk, const std::string& where) {
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
  DT_MPI(MPI_Type_contiguous(static_cast<int>(chunk), MPI_BYTE, &block), where, ": MPI_Type_contiguous(", chunk,
         " bytes)");
  const int rc_body = MPI_Type_contiguous(static_cast<int>(blocks), block, &body);
  MPI_Type_free(&block);
  if (rc_body != MPI_SUCCESS) throw_mpi(rc_body, concat(where, ": MPI_Type_contiguous(", blocks, " blocks)"));
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

ByteType::ByteType(ByteType&& other) noexcept
    : type_(std::exchange(other.type_, MPI_BYTE)),
      count_(other.count_),
      derived_(std::exchange(other.derived_, false)) {}

void ByteType::release() {
  if (derived_ && !mpi_finalized()) MPI_Type_free(&type_);
  derived_ = false;
  type_ = MPI_BYTE;
}

void check_received(const MPI_Status& status, const ByteType& type, std::size_t expected, const std::string& where) {
  MPI_Count got = 0;
  DT_MPI(MPI_Get_elements_x(&status, type.type(), &got), where, ": MPI_Get_elements_x");
  if (got == MPI_UNDEFINED || static_cast<std::size_t>(got) != expected) {
    throw CommError(concat("mpi: ", where, ": message size mismatch: received ", got, " bytes, expected ", expected));
  }
}

}  // namespace dynatrain::comm::mpi_detail
