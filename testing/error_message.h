// Tests of refusals: the message of the error a call throws.
#pragma once

#include <string>
#include <utility>

namespace dynatrain::testing {

// The what() of the E that fn() throws; "" when it throws nothing (any other exception passes).
template <class E, class Fn>
std::string error_message(Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace dynatrain::testing
