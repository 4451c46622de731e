#include "comm/transport.h"

#include <exception>

#include "common/error.h"

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

bool agree_with_root(Transport& transport, bool ok) {
  std::uint8_t flag = ok ? 1 : 0;
  transport.broadcast(&flag, sizeof flag, 0);
  return flag != 0;
}

void check_all_to_all_args(int size, const std::vector<std::size_t>& send_counts,
                           const std::vector<std::size_t>& send_offsets,
                           const std::vector<std::size_t>& recv_counts,
                           const std::vector<std::size_t>& recv_offsets) {
  const auto n = static_cast<std::size_t>(size);
  DT_CHECK(send_counts.size() == n && send_offsets.size() == n && recv_counts.size() == n &&
               recv_offsets.size() == n,
           "all_to_all: count/offset vectors must have size() = ", n, " entries");
}

}  // namespace dynatrain::comm
