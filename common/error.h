// Error types shared by every module. The rules are written down once in docs/errors.md:
//   * InputError     — the user gave something invalid (config string, model file, flag value).
//                      The message names the bad value and what would be valid. CLI exit code 2.
//   * CommError      — a transport operation failed; the communicator must be rebuilt. Recoverable.
//     PeerLostError  — a CommError that proves a peer process is gone (it names the pid).
//   * InvariantError — a broken internal invariant (a bug). DT_CHECK throws it with both operands.
// Library code never calls exit() or abort(); it throws one of these.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dynatrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputError : public Error {
 public:
  using Error::Error;
};

class CommError : public Error {
 public:
  using Error::Error;
};

// A peer's process no longer exists (e.g. a direct read of its memory found no such process):
// the job cannot go on with it. pid() names the process, so the CLI can name its rank.
class PeerLostError : public CommError {
 public:
  PeerLostError(int pid, const std::string& message) : CommError(message), pid_(pid) {}
  int pid() const { return pid_; }

 private:
  int pid_;
};

class InvariantError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

// Throws InputError with the streamed parts as message: DT_INPUT_ERROR("tp=", tp, " must ...").
#define DT_INPUT_ERROR(...) throw ::dynatrain::InputError(::dynatrain::detail::concat(__VA_ARGS__))

// Internal invariant: throws InvariantError naming file, line and the failed condition.
#define DT_CHECK(cond, ...)                                                                     \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::dynatrain::InvariantError(::dynatrain::detail::concat(                            \
          __FILE__, ":", __LINE__, ": check failed: ", #cond, " " __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

// Internal invariant comparing two values; the message prints both operands.
#define DT_CHECK_EQ(a, b)                                                                                            \
  do {                                                                                                               \
    const auto& dt_a_ = (a);                                                                                         \
    const auto& dt_b_ = (b);                                                                                         \
    if (!(dt_a_ == dt_b_))                                                                                           \
      throw ::dynatrain::InvariantError(::dynatrain::detail::concat(__FILE__, ":", __LINE__, ": check failed: ", #a, \
                                                                    " == ", #b, " (", dt_a_, " vs ", dt_b_, ")"));   \
  } while (0)

}  // namespace dynatrain
