#include "exec/page_mapping.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include "common/error.h"
#include "exec/engine.h"

namespace dynatrain::exec::detail {

std::byte* map_untouched(std::size_t bytes) {
  const std::size_t span = bytes + kHuge;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::byte*>(p);
  auto* aligned = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<std::uintptr_t>(base), kHuge));
  if (aligned > base) ::munmap(base, static_cast<std::size_t>(aligned - base));
  std::byte* end = aligned + bytes;
  if (base + span > end) ::munmap(end, static_cast<std::size_t>(base + span - end));
  return aligned;
}

void remap_range(std::byte* from, std::byte* to, std::size_t bytes) {
  void* r = ::mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
  if (r != MAP_FAILED) return;
  DT_CHECK(errno == EFAULT && bytes > kPageBytes, "mremap of ", bytes, " bytes failed: ", std::strerror(errno));
  // Halves on a 2 MiB boundary where the run is whole 2 MiB pages: a cut inside one would split it.
  const std::size_t half = round_up(bytes / 2, bytes % kHuge == 0 && bytes > kHuge ? kHuge : kPageBytes);
  remap_range(from, to, half);
  remap_range(from + half, to + half, bytes - half);
}

}  // namespace dynatrain::exec::detail
