// The one clock of the project: steady (never jumps with the wall clock), and the elapsed time
// since a point of it in seconds, which is how every figure the project prints is measured.
#pragma once

#include <chrono>

namespace dynatrain {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The wall clock in seconds since the epoch: only to line up an event with another process's
// stamp (a benchmark's kill), never to measure a duration.
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace dynatrain
