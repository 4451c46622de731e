// Helpers shared by the transport cases (transport_cases_*.cc): the content oracle of every
// message (a pure function of sender, receiver, tag and index), uneven sizes, exception checks.
// Internal to tests/comm; each case file adds its cases to the list in transport_cases.cc.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "tests/comm/transport_cases.h"

namespace dynatrain::comm::testing {

// The case lists of each concern, in the order transport_cases() runs them.
void add_point_to_point_cases(std::vector<CommCase>& cases);
void add_collective_cases(std::vector<CommCase>& cases);
void add_error_cases(std::vector<CommCase>& cases);
void add_runs_cases(std::vector<CommCase>& cases);

namespace support {

using Bytes = std::vector<std::uint8_t>;
using Requests = std::vector<std::unique_ptr<Request>>;

// The byte a sender puts at index i of message (src -> dst, tag); dst = -1 for broadcasts.
inline std::uint8_t pattern(int src, int dst, int tag, std::size_t i) {
  std::uint64_t x = static_cast<std::uint64_t>(src + 1) * 0x9E3779B97F4A7C15ull ^
                    static_cast<std::uint64_t>(dst + 2) * 0xC2B2AE3D27D4EB4Full ^
                    static_cast<std::uint64_t>(tag + 3) * 0x165667B19E3779F9ull ^
                    static_cast<std::uint64_t>(i) * 0xD6E8FEB86659FD93ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::uint8_t>(x);
}

inline Bytes filled(int src, int dst, int tag, std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = pattern(src, dst, tag, i);
  return b;
}

// Deliberately uneven message sizes: differ per sender and receiver, never a multiple of 4.
inline std::size_t msg_bytes(int src, int dst, int world) {
  return static_cast<std::size_t>(world) * 3 + 1 + 5 * static_cast<std::size_t>(src) + static_cast<std::size_t>(dst);
}

// Integer-valued floats, so sums over a few ranks are exact in any order.
inline float value(int who, std::size_t i) { return static_cast<float>((who * 37 + i * 11) % 1024); }

inline void expect_pattern(Transport& t, const Bytes& got, int src, int dst, int tag, const char* what) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    CASE_REQUIRE(got[i] == pattern(src, dst, tag, i), what, ": byte ", i, " of ", got.size(), " from ", src, " to ",
                 dst, " tag ", tag, " is ", int(got[i]), ", want ", int(pattern(src, dst, tag, i)));
  }
}

template <typename Fn>
void expect_throws(Transport& t, Fn&& fn, const char* expected_type, bool (*matches)(std::exception_ptr),
                   const char* what) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  CASE_REQUIRE(error != nullptr, what, ": nothing thrown, expected ", expected_type);
  CASE_REQUIRE(matches(error), what, ": threw something other than ", expected_type);
}

template <typename E>
bool is(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

inline int next(const Transport& t) { return (t.rank() + 1) % t.size(); }
inline int prev(const Transport& t) { return (t.rank() + t.size() - 1) % t.size(); }

}  // namespace support
}  // namespace dynatrain::comm::testing
