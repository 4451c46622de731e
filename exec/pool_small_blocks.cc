// PoolAllocator's small blocks (exec/pool_allocator.h): best-fit ranges over chunks, which come
// from the heap or, with huge pages, are slabs of 2 MiB pages resident where blocks lie.
// Invariants: every free range lies in one chunk and is merged with free neighbours of that
// chunk; a slab's 2 MiB page is resident while a block overlaps it (or until a commit takes it
// while it holds none); small_reserved_ counts heap chunks and resident slab pages.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common/error.h"
#include "exec/page_mapping.h"
#include "exec/pool_allocator.h"

namespace dynatrain::exec {
using namespace detail;  // NOLINT(google-build-using-namespace): the pool's own page helpers

void PoolAllocator::insert_free(std::byte* p, Range r) {
  // Merge with the following and preceding free ranges of the same chunk.
  auto next = free_.lower_bound(p);
  if (next != free_.end() && next->first == p + r.size && next->second.chunk == r.chunk) {
    r.size += next->second.size;
    erase_free(next);
  }
  auto it = free_.lower_bound(p);
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size == p && prev->second.chunk == r.chunk) {
      p = prev->first;
      r.size += prev->second.size;
      erase_free(prev);
    }
  }
  free_.emplace(p, r);
  by_size_.emplace(r.size, p);
}

void PoolAllocator::erase_free(std::map<std::byte*, Range>::iterator it) {
  auto [lo, hi] = by_size_.equal_range(it->second.size);
  for (auto s = lo; s != hi; ++s)
    if (s->second == it->first) {
      by_size_.erase(s);
      break;
    }
  free_.erase(it);
}

std::byte* PoolAllocator::allocate_small(std::size_t bytes) {
  const std::size_t n = round_up(bytes, kAlign);
  std::byte* p = nullptr;
  Range r;
  if (auto fit = by_size_.lower_bound(n); fit != by_size_.end()) {
    p = fit->second;
    auto it = free_.find(p);
    r = it->second;
    erase_free(it);
  } else {
    const std::uint32_t id = new_chunk(n);
    p = chunks_[id].base;
    r = Range{chunks_[id].size, id};
  }
  if (r.size > n) insert_free(p + n, Range{r.size - n, r.chunk});
  r.size = n;
  Chunk& chunk = chunks_[r.chunk];
  if (chunk.slab) make_slab_resident(chunk, p, n);
  used_.emplace(p, r);
  chunk.live += n;
  live_ += n;
  peak_live_ = std::max(peak_live_, live_);
  return p;
}

std::uint32_t PoolAllocator::new_chunk(std::size_t bytes) {
  Chunk c{nullptr, bytes, 0, huge_ && bytes >= kMappedBytes, {}};
  if (c.slab) {
    c.size = std::max(kSlabBytes, round_up_huge(bytes));
    c.base = map_untouched(c.size);
    ::madvise(c.base, c.size, MADV_HUGEPAGE);  // a hint: a refusal only costs speed
    c.resident.assign(c.size / kHuge, false);  // resident where blocks come (make_slab_resident)
  } else {
    c.base = static_cast<std::byte*>(std::aligned_alloc(kAlign, bytes));
    if (!c.base) throw std::bad_alloc();
    fresh_ += bytes;
    small_reserved_ += bytes;
    note_reserved();
  }
  const std::uint32_t id = next_chunk_++;
  chunks_[id] = std::move(c);
  return id;
}

void PoolAllocator::make_slab_resident(Chunk& c, std::byte* p, std::size_t bytes) {
  const auto first = static_cast<std::size_t>(p - c.base) / kHuge;
  const auto last = (static_cast<std::size_t>(p - c.base) + bytes + kHuge - 1) / kHuge;
  for (std::size_t u = first; u < last; ++u) {
    if (c.resident[u]) continue;
    commit_huge(c.base + u * kHuge, kHuge);  // a spare or idle slab 2 MiB page, else fresh
    c.resident[u] = true;
    small_reserved_ += kHuge;
  }
  note_reserved();
}

template <typename Fn>
bool PoolAllocator::each_idle_slab_unit(Fn&& fn) {
  for (auto it = by_size_.lower_bound(kHuge); it != by_size_.end(); ++it) {
    std::byte* const p = it->second;
    Chunk& c = chunks_.at(free_.at(p).chunk);
    if (!c.slab) continue;
    for (auto* unit = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<std::uintptr_t>(p), kHuge));
         unit + kHuge <= p + it->first; unit += kHuge) {
      const auto u = static_cast<std::size_t>(unit - c.base) / kHuge;
      if (c.resident[u] && fn(c, u)) return true;
    }
  }
  return false;
}

bool PoolAllocator::take_slab_unit(std::byte* to) {
  return each_idle_slab_unit([&](Chunk& c, std::size_t u) {
    remap_range(c.base + u * kHuge, to, kHuge);  // one page-table entry; the slab keeps the empty address space
    c.resident[u] = false;
    small_reserved_ -= kHuge;
    return true;
  });
}

std::size_t PoolAllocator::idle_slab_bytes() {
  std::size_t n = 0;
  each_idle_slab_unit([&](Chunk&, std::size_t) {
    n += kHuge;
    return false;
  });
  return n;
}

std::size_t PoolAllocator::free_chunk(std::map<std::uint32_t, Chunk>::iterator it, bool keep_pages) {
  const Chunk c = std::move(it->second);
  chunks_.erase(it);
  if (!c.slab) {
    std::free(c.base);
    small_reserved_ -= c.size;
    return c.size;
  }
  std::size_t held = 0;
  for (std::size_t u = 0; u < c.resident.size();) {
    std::size_t v = u;
    while (v < c.resident.size() && c.resident[v] == c.resident[u]) ++v;
    std::byte* run = c.base + u * kHuge;
    const std::size_t n = (v - u) * kHuge;
    if (c.resident[u] && keep_pages) {
      add_spare(run, n);  // warm 2 MiB pages for the next commit or slab
    } else {
      ::munmap(run, n);
    }
    held += c.resident[u] ? n : 0;
    u = v;
  }
  small_reserved_ -= held;
  return held;
}

void PoolAllocator::release_small(std::byte* data, std::size_t bytes) {
  auto it = used_.find(data);
  DT_CHECK(it != used_.end(), "release of a pointer this pool did not hand out");
  const Range r = it->second;
  DT_CHECK_EQ(r.size, round_up(bytes, kAlign));
  used_.erase(it);
  auto chunk = chunks_.find(r.chunk);
  chunk->second.live -= r.size;
  live_ -= r.size;
  insert_free(data, r);
  if (chunk->second.slab && chunk->second.live == 0) {  // empty: its pages serve any commit now
    auto whole = free_.find(chunk->second.base);
    DT_CHECK(whole != free_.end() && whole->second.size == chunk->second.size, "pool slab bookkeeping");
    erase_free(whole);
    free_chunk(chunk, true);
  }
}

}  // namespace dynatrain::exec
