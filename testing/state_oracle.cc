#include "testing/state_oracle.h"

#include <algorithm>
#include <cstring>

#include "testing/fill.h"

namespace dynatrain::testing {

std::vector<std::byte*> allocate_filled(const vps::Layout& model_layout, const vps::RankLayout& layout,
                                        exec::StateAllocator& alloc) {
  const auto& eb = model_layout.options().elem_bytes;
  std::vector<std::byte*> bufs(layout.buffers.size(), nullptr);
  for (std::size_t i = 0; i < layout.buffers.size(); ++i) {
    const auto& b = layout.buffers[i];
    const int e = eb[static_cast<int>(b.kind)];
    const std::size_t bytes = static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(e);
    if (bytes == 0) continue;
    bufs[i] = alloc.allocate(bytes);
    std::memset(bufs[i], 0, bytes);
    fill_buffer(model_layout.tensors(), b, e, bufs[i]);
  }
  return bufs;
}

void release_all(const vps::Layout& model_layout, const vps::RankLayout& layout, std::vector<std::byte*>& bufs,
                 exec::StateAllocator& alloc) {
  const auto& eb = model_layout.options().elem_bytes;
  for (std::size_t i = 0; i < bufs.size(); ++i) {
    if (!bufs[i]) continue;
    const auto& b = layout.buffers[i];
    alloc.release(bufs[i], static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(eb[static_cast<int>(b.kind)]));
    bufs[i] = nullptr;
  }
}

int verify_state(const vps::Layout& model_layout, const vps::RankLayout& layout, const std::vector<std::byte*>& bufs,
                 std::string* first, std::uint32_t zeroed_kinds) {
  const auto& eb = model_layout.options().elem_bytes;
  int bad = 0;
  for (std::size_t i = 0; i < layout.buffers.size(); ++i) {
    const auto& b = layout.buffers[i];
    if (b.numel == 0) continue;
    if (!bufs.at(i)) {
      if (bad++ == 0 && first) *first = "buffer " + std::to_string(i) + " missing";
      continue;
    }
    if ((zeroed_kinds >> static_cast<int>(b.kind)) & 1u) {
      const std::size_t n = static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(eb[static_cast<int>(b.kind)]);
      const std::byte* p = bufs[i];
      const std::size_t at =
          static_cast<std::size_t>(std::find_if(p, p + n, [](std::byte x) { return x != std::byte{0}; }) - p);
      if (at < n && bad++ == 0 && first)
        *first = "buffer " + std::to_string(i) + " (" + vps::state_kind_name(b.kind) +
                 ", materialised zeroed) has a non-zero byte at " + std::to_string(at);
      continue;
    }
    if (auto m = verify_buffer(model_layout.tensors(), b, eb[static_cast<int>(b.kind)], bufs[i])) {
      if (bad++ == 0 && first) *first = m->str(model_layout.tensors());
    }
  }
  return bad;
}

std::vector<std::uint64_t> gather_u64(comm::Transport& world, std::uint64_t value) {
  return comm::all_gather_values(world, value);
}

std::vector<double> gather_double(comm::Transport& world, double value) {
  return comm::all_gather_values(world, value);
}

}  // namespace dynatrain::testing
