// Address-space helpers of the pool allocator (exec/pool_allocator.h): 2 MiB-aligned mappings
// with no page touched, and page moves that leave the old range mapped and empty.
#pragma once

#include <cstddef>

#include "exec/huge_pages.h"

namespace dynatrain::exec::detail {

constexpr std::size_t kHuge = kHugePageBytes;  // mappings start 2 MiB-aligned: mremap then moves
                                               // whole page-table pages where it can
inline std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

// Address space for `bytes` (a multiple of pages), 2 MiB-aligned, no page touched. Throws
// std::bad_alloc when the system has none.
std::byte* map_untouched(std::size_t bytes);

// Moves the pages [from, from + bytes) to [to, to + bytes) (replacing what was there). The old
// range stays mapped, empty (MREMAP_DONTUNMAP), so no other mapping can take its addresses
// while its block lives. mremap moves within one kernel mapping only; a run that spans several
// is moved in halves.
void remap_range(std::byte* from, std::byte* to, std::size_t bytes);

}  // namespace dynatrain::exec::detail
