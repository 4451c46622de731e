#include "comm/transport.h"

#include <exception>

namespace dynatrain::comm {

void wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  std::exception_ptr first;
  for (auto& request : requests) {
    if (!request) continue;
    try {
      request->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace dynatrain::comm
