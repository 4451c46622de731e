// The comm test core: every case is one function written once against `Transport&`, run by every
// rank. Bootstraps (style.md item 8):
//   inproc_transport_test.cc  ranks as threads (run_ranks), 1..4 ranks, under gtest
//   mpi_transport_test.cc     ranks as processes under `mpirun -np N`, also with a tiny MPI chunk size
//
// Cases check by content: every byte sent is a pure function of (sender, receiver, tag, index) and
// every received byte is compared. A failed check throws CaseFailure naming the rank; no gtest
// assertion runs inside a case, so both bootstraps report failures the same way.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "common/error.h"

namespace dynatrain::comm::testing {

class CaseFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CommCase {
  const char* name;
  void (*body)(Transport& t);
};

// gtest prints parameters with this (instead of a hex dump).
inline void PrintTo(const CommCase& c, std::ostream* os) { *os << c.name; }

// All generic cases, in a fixed order.
const std::vector<CommCase>& transport_cases();

}  // namespace dynatrain::comm::testing

// Throws CaseFailure("file:line: rank r: cond: parts...") unless cond holds. Needs `t` in scope.
#define CASE_REQUIRE(cond, ...)                                                                                       \
  do {                                                                                                                \
    if (!(cond))                                                                                                      \
      throw ::dynatrain::comm::testing::CaseFailure(::dynatrain::detail::concat(                                      \
          __FILE__, ":", __LINE__, ": rank ", t.rank(), "/", t.size(), ": ", #cond, " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
