#include "comm/mpi/mpi_error.h"

#include "comm/transport.h"

namespace dynatrain::comm::mpi_detail {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<std::size_t>(len));
}

void throw_mpi(int code, const std::string& what) {
  throw CommError(concat("mpi: ", what, " failed: ", mpi_error_string(code), " (MPI error ", code, ")"));
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void check_peer(int peer, int size, const char* what) {
  DT_CHECK(peer >= 0 && peer < size, what, " rank ", peer, " is outside [0, ", size, ")");
}

void check_tag(int tag) { DT_CHECK(tag >= 0 && tag <= kMaxTag, "tag ", tag, " is outside [0, ", kMaxTag, "]"); }

}  // namespace dynatrain::comm::mpi_detail
