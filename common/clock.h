// The one clock of the project: steady (never jumps with the wall clock), and the elapsed time
// since a point of it in seconds, which is how every figure the project prints is measured.
#pragma once

#include <chrono>

namespace dynatrain {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace dynatrain
