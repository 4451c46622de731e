// MPI error translation and argument checks shared by the Open MPI backend's files.
//
// Invariants:
//  * Every MPI call of the backend goes through DT_MPI (or checks its code by hand and calls
//    throw_mpi): a non-success code becomes CommError "mpi: <what> failed: <MPI's string> (MPI
//    error N)"; the context parts are formatted only on failure.
//  * check_peer / check_tag throw InvariantError before anything is posted.
//  * Nothing here calls MPI after MPI_Finalize except MPI_Finalized (mpi_finalized()), which
//    destructors use to skip freeing handles.
#pragma once

#include <mpi.h>

#include <string>

#include "common/error.h"

namespace dynatrain::comm::mpi_detail {

using ::dynatrain::detail::concat;

// MPI's text for an error code ("unknown MPI error" if MPI cannot say).
std::string mpi_error_string(int code);

[[noreturn]] void throw_mpi(int code, const std::string& what);

bool mpi_finalized();

void check_peer(int peer, int size, const char* what);
void check_tag(int tag);

}  // namespace dynatrain::comm::mpi_detail

// Calls an MPI function; on failure throws CommError naming the operation. The context parts are
// only formatted on failure.
#define DT_MPI(call, ...)                                                                             \
  do {                                                                                                \
    const int dt_mpi_rc_ = (call);                                                                    \
    if (dt_mpi_rc_ != MPI_SUCCESS)                                                                    \
      ::dynatrain::comm::mpi_detail::throw_mpi(dt_mpi_rc_, ::dynatrain::detail::concat(__VA_ARGS__)); \
  } while (0)
