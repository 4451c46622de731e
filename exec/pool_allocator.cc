#include "exec/pool_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/error.h"

namespace dynatrain::exec {
namespace {
std::size_t round_up(std::size_t n) {
  return (n + PoolAllocator::kAlign - 1) / PoolAllocator::kAlign * PoolAllocator::kAlign;
}
}  // namespace

PoolAllocator::~PoolAllocator() {
  for (auto& [id, c] : chunks_) std::free(c.base);
}

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

std::byte* PoolAllocator::allocate(std::size_t bytes) {
  DT_CHECK(bytes > 0, "zero-byte allocation");
  const std::size_t n = round_up(bytes);
  std::lock_guard lock(mu_);
  std::byte* p = nullptr;
  Range r;
  if (auto fit = by_size_.lower_bound(n); fit != by_size_.end()) {
    p = fit->second;
    auto it = free_.find(p);
    r = it->second;
    erase_free(it);
    if (r.size > n) insert_free(p + n, Range{r.size - n, r.chunk});
    r.size = n;
  } else {
    p = static_cast<std::byte*>(std::aligned_alloc(kAlign, n));
    if (!p) throw std::bad_alloc();
    const std::uint32_t id = next_chunk_++;
    chunks_[id] = Chunk{p, n, 0};
    r = Range{n, id};
    reserved_ += n;
    fresh_ += n;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  used_.emplace(p, r);
  chunks_[r.chunk].live += n;
  live_ += n;
  peak_live_ = std::max(peak_live_, live_);
  return p;
}

void PoolAllocator::release(std::byte* data, std::size_t bytes) {
  if (!data) return;
  std::lock_guard lock(mu_);
  auto it = used_.find(data);
  DT_CHECK(it != used_.end(), "release of a pointer this pool did not hand out");
  const Range r = it->second;
  DT_CHECK_EQ(r.size, round_up(bytes));
  used_.erase(it);
  chunks_[r.chunk].live -= r.size;
  live_ -= r.size;
  insert_free(data, r);
}

std::size_t PoolAllocator::prefault(std::size_t bytes) {
  std::lock_guard lock(mu_);
  std::size_t free_bytes = 0;
  for (const auto& [p, r] : free_) free_bytes += r.size;
  if (free_bytes >= bytes) return 0;
  const std::size_t n = round_up(bytes - free_bytes);
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, n));
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, n);  // first touch now, not in the switch that will use it
  const std::uint32_t id = next_chunk_++;
  chunks_[id] = Chunk{p, n, 0};
  reserved_ += n;
  fresh_ += n;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  insert_free(p, Range{n, id});
  return n;
}

std::size_t PoolAllocator::trim() {
  std::lock_guard lock(mu_);
  std::size_t freed = 0;
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    if (it->second.live == 0) {
      auto f = free_.find(it->second.base);
      DT_CHECK(f != free_.end() && f->second.size == it->second.size, "pool chunk bookkeeping");
      erase_free(f);
      std::free(it->second.base);
      freed += it->second.size;
      reserved_ -= it->second.size;
      it = chunks_.erase(it);
    } else {
      ++it;
    }
  }
  return freed;
}

void PoolAllocator::reset_peaks() {
  std::lock_guard lock(mu_);
  peak_live_ = live_;
  peak_reserved_ = reserved_;
}

std::size_t PoolAllocator::live_bytes() const { std::lock_guard l(mu_); return live_; }
std::size_t PoolAllocator::peak_live() const { std::lock_guard l(mu_); return peak_live_; }
std::size_t PoolAllocator::reserved_bytes() const { std::lock_guard l(mu_); return reserved_; }
std::size_t PoolAllocator::peak_reserved() const { std::lock_guard l(mu_); return peak_reserved_; }
std::size_t PoolAllocator::fresh_bytes() const { std::lock_guard l(mu_); return fresh_; }

}  // namespace dynatrain::exec
