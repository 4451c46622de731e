#include "comm/transport.h"

#include <cstring>
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

void Transport::all_gather_bytes(const void* send, void* recv, std::size_t bytes_per_rank) {
  const std::size_t words = (bytes_per_rank + sizeof(float) - 1) / sizeof(float);
  const auto n = static_cast<std::size_t>(size());
  std::vector<float> mine(words), all(words * n);
  if (bytes_per_rank > 0) std::memcpy(mine.data(), send, bytes_per_rank);
  all_gather(mine.data(), all.data(), words);
  for (std::size_t r = 0; r < n; ++r)
    if (bytes_per_rank > 0)
      std::memcpy(static_cast<std::byte*>(recv) + r * bytes_per_rank, all.data() + r * words, bytes_per_rank);
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
