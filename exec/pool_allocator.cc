#include "exec/pool_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <new>

#include "common/error.h"
#include "exec/machine_rates.h"
#include "exec/page_mapping.h"

namespace dynatrain::exec {
using namespace detail;  // NOLINT(google-build-using-namespace): the pool's own page helpers

HugePages parse_huge_pages(const std::string& text) {
  if (text == "auto") return HugePages::kAuto;
  if (text == "off") return HugePages::kOff;
  DT_INPUT_ERROR("huge pages \"", text, "\": valid values are auto, off");
}

PoolAllocator::PoolAllocator(HugePages policy, const TransitionOptions& engine)
    : PoolAllocator(policy, policy == HugePages::kOff ? ThpMode::kNever : thp_mode(), engine) {}

PoolAllocator::PoolAllocator(HugePages policy, ThpMode mode, const TransitionOptions& engine)
    : huge_(policy == HugePages::kAuto && mode != ThpMode::kNever),
      carve_below_(huge_ && engine.keep_path != KeepPath::kRemap
                       ? std::min(kHugeMinBytes, pagewise_threshold(engine.mem_budget))
                       : kMappedBytes) {}

std::size_t PoolAllocator::block_bytes(std::size_t bytes) const {
  return huge_ && bytes >= kHugeMinBytes ? round_up_huge(bytes) : round_up(bytes, kPageBytes);
}

PoolAllocator::~PoolAllocator() {
  for (auto& [id, c] : chunks_) c.slab ? static_cast<void>(::munmap(c.base, c.size)) : std::free(c.base);
  for (auto& [base, m] : mapped_) {
    for (std::size_t i = 0; i < m.pages.size();) {
      std::size_t j = i;
      while (j < m.pages.size() && (m.pages[j] == kSpare) == (m.pages[i] == kSpare)) ++j;
      if (m.pages[i] != kSpare) ::munmap(base + i * kPageBytes, (j - i) * kPageBytes);
      i = j;
    }
  }
  for (auto& [p, n] : spares_) ::munmap(p, n);
}

void PoolAllocator::note_reserved() { peak_reserved_ = std::max(peak_reserved_, reserved_locked()); }

// ---- mapped blocks ----

const PoolAllocator::Mapped* PoolAllocator::owner_of(const std::byte* p) const {
  auto it = mapped_.upper_bound(const_cast<std::byte*>(p));
  if (it == mapped_.begin()) return nullptr;
  --it;
  return p < it->first + it->second.bytes ? &it->second : nullptr;
}

// A run next to a spare run of the same block (or of no block) joins it: a block given back in
// pieces is one run again, so its whole 2 MiB pages can be moved whole (take_huge_units).
void PoolAllocator::add_spare(std::byte* p, std::size_t bytes) {
  spare_ += bytes;
  const Mapped* owner = owner_of(p);
  auto next = spares_.find(p + bytes);
  if (next != spares_.end() && owner_of(next->first) == owner) {
    bytes += next->second;
    spares_.erase(next);
  }
  auto after = spares_.upper_bound(p);
  if (after != spares_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == p && owner_of(prev->first) == owner) {
      prev->second += bytes;
      return;
    }
  }
  spares_.emplace(p, bytes);
}

std::map<std::byte*, std::size_t>::iterator PoolAllocator::pick_spare(const std::byte* to, bool congruent) {
  if (congruent)
    for (auto it = spares_.begin(); it != spares_.end(); ++it)
      if ((reinterpret_cast<std::uintptr_t>(it->first) - reinterpret_cast<std::uintptr_t>(to)) % kHuge == 0) return it;
  return spares_.begin();
}

std::size_t PoolAllocator::take_spares(std::byte* to, std::size_t bytes, bool congruent) {
  std::size_t done = 0;
  while (done < bytes && !spares_.empty()) {
    auto it = pick_spare(to + done, congruent);
    std::byte* from = it->first;
    const std::size_t have = it->second;
    const std::size_t n = std::min(have, bytes - done);
    DT_CHECK(from + n <= to || to + bytes <= from, "commit over pages that are spare in place");
    spares_.erase(it);
    if (have > n) spares_.emplace(from + n, have - n);
    move_spare(from, to + done, n);
    done += n;
  }
  return done;
}

// Moves [from, from + n) of a spare run (already out of spares_) to `to`.
void PoolAllocator::move_spare(std::byte* from, std::byte* to, std::size_t n) {
  remap_range(from, to, n);
  // The empty range left behind: part of a live block (kMoved), else nobody's.
  auto owner = mapped_.upper_bound(from);
  if (owner != mapped_.begin() && std::prev(owner)->first + std::prev(owner)->second.bytes >= from + n) {
    --owner;
    const std::size_t first = static_cast<std::size_t>(from - owner->first) / kPageBytes;
    for (std::size_t k = first; k < first + n / kPageBytes; ++k) owner->second.pages[k] = kMoved;
  } else {
    ::munmap(from, n);
  }
  spare_ -= n;
}

std::size_t PoolAllocator::take_huge_units(std::byte* to, std::size_t units) {
  std::byte* const to_end = to + units * kHuge;
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    std::byte* p = it->first;
    const std::size_t n = it->second;
    auto* unit = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<std::uintptr_t>(p), kHuge));
    if (unit + kHuge > p + n || (p < to_end && to < p + n)) continue;  // no whole page, or in the target
    const std::size_t take = std::min(units, static_cast<std::size_t>(p + n - unit) / kHuge);
    std::byte* const taken_end = unit + take * kHuge;
    spares_.erase(it);
    if (unit > p) spares_.emplace(p, static_cast<std::size_t>(unit - p));
    if (taken_end < p + n) spares_.emplace(taken_end, static_cast<std::size_t>(p + n - taken_end));
    move_spare(unit, to, take * kHuge);  // one mremap: one TLB flush for all of them
    return take;
  }
  return 0;
}

void PoolAllocator::commit_huge(std::byte* to, std::size_t bytes) {
  std::byte* const end = to + bytes;
  std::byte* fresh = to;  // [fresh, at): fresh pages not yet made resident
  auto flush = [&](std::byte* upto) {
    if (upto > fresh) make_resident_huge(fresh, static_cast<std::size_t>(upto - fresh));
    fresh_ += static_cast<std::size_t>(upto - fresh);
    populated_ += static_cast<std::size_t>(upto - fresh);
  };
  for (std::byte* at = to; at < end;) {
    auto* next = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<std::uintptr_t>(at) + 1, kHuge));
    next = std::min(next, end);
    const auto n = static_cast<std::size_t>(next - at);
    // Whole 2 MiB pages from whole spare ones (as many at once as one spare run holds), else
    // from a slab's idle one; a part of one (a commit's ends: never a huge page whole) from spare
    // pages congruent with it, as far as they go.
    std::size_t warm = 0;
    if (n == kHuge) {
      const auto units = static_cast<std::size_t>(end - at) / kHuge;
      warm = take_huge_units(at, units) * kHuge;
      if (warm == 0 && take_slab_unit(at)) warm = kHuge;
    } else {
      warm = take_spares(at, n, true);
    }
    if (warm > 0) {
      flush(at);
      fresh = at + warm;
    }
    at = n == kHuge ? at + std::max(warm, kHuge) : next;
  }
  flush(end);
}

std::byte* PoolAllocator::reserve_locked(std::size_t bytes) {
  DT_CHECK(bytes > 0, "zero-byte allocation");
  const std::size_t n = block_bytes(bytes);
  const bool huge = huge_ && bytes >= kHugeMinBytes;
  std::byte* base = map_untouched(n);
  if (huge) ::madvise(base, n, MADV_HUGEPAGE);  // a hint: a refusal only costs speed
  mapped_.emplace(base,
                  Mapped{n, round_up(bytes, kPageBytes), huge, std::vector<PageState>(n / kPageBytes, kUntouched)});
  return base;
}

PoolAllocator::Mapped& PoolAllocator::mapped_block(std::byte* base, std::size_t offset, std::size_t bytes) {
  auto it = mapped_.find(base);
  DT_CHECK(it != mapped_.end(), "page-wise call on a pointer that is no mapped block of this pool");
  DT_CHECK(offset % kPageBytes == 0 && offset + bytes <= it->second.bytes, "page range ", offset, "+", bytes,
           " outside a block of ", it->second.bytes, " bytes or not page-aligned");
  return it->second;
}

void PoolAllocator::commit_locked(std::byte* base, std::size_t offset, std::size_t bytes) {
  Mapped& m = mapped_block(base, offset, bytes);
  const std::size_t first = offset / kPageBytes, last = round_up(offset + bytes, kPageBytes) / kPageBytes;
  if (m.huge) {
    commit_units(m, base, first, last);
  } else {
    for (std::size_t i = first; i < last;) {
      if (m.pages[i] == kLive) {
        ++i;
        continue;
      }
      std::size_t j = i;  // [i, j): a run of pages to make live
      while (j < last && m.pages[j] != kLive) {
        DT_CHECK(m.pages[j] != kSpare, "commit of a page given back by decommit");
        ++j;
      }
      const std::size_t run = (j - i) * kPageBytes;
      fresh_ += run - take_spares(base + i * kPageBytes, run, false);  // the rest: touched by a first write
      for (std::size_t k = i; k < j; ++k) m.pages[k] = kLive;
      mapped_live_ += run;
      live_ += run;
      i = j;
    }
  }
  peak_live_ = std::max(peak_live_, live_);
  note_reserved();
}

// Each 2 MiB page that holds no resident page is made resident whole (commit_huge: a spare or
// idle slab 2 MiB page, else fresh in huge pages), its pages outside [first, last) idle. In a
// resident one, idle pages become live, and pages moved away (move_pages) get spare or fresh
// 4 KiB pages.
void PoolAllocator::commit_units(Mapped& m, std::byte* base, std::size_t first, std::size_t last) {
  constexpr std::size_t kUnitPages = kHuge / kPageBytes;
  auto empty = [&](std::size_t ua) {
    for (std::size_t k = ua; k < ua + kUnitPages; ++k)
      if (m.pages[k] != kUntouched && m.pages[k] != kMoved) return false;
    return true;
  };
  for (std::size_t k = first; k < last; ++k) DT_CHECK(m.pages[k] != kSpare, "commit of a page given back by decommit");
  std::size_t made_live = 0;
  for (std::size_t ua = first / kUnitPages * kUnitPages; ua < last;) {
    if (empty(ua)) {  // a stretch of empty 2 MiB pages: made resident at once
      std::size_t ub = ua + kUnitPages;
      while (ub < last && empty(ub)) ub += kUnitPages;
      commit_huge(base + ua * kPageBytes, (ub - ua) * kPageBytes);
      for (std::size_t k = ua; k < ub; ++k) {
        const bool asked = k >= first && k < last;
        m.pages[k] = asked ? kLive : kIdle;
        made_live += asked ? 1 : 0;
        idle_ += asked ? 0 : kPageBytes;
      }
      ua = ub;
      continue;
    }
    made_live += fill_resident_unit(m, base, std::max(first, ua), std::min(last, ua + kUnitPages));
    ua += kUnitPages;
  }
  mapped_live_ += made_live * kPageBytes;
  live_ += made_live * kPageBytes;
}

// Pages [a, b) of one resident 2 MiB page: idle ones become live, ones moved away (move_pages)
// get spare or fresh 4 KiB pages. Returns the pages made live.
std::size_t PoolAllocator::fill_resident_unit(Mapped& m, std::byte* base, std::size_t a, std::size_t b) {
  std::size_t made_live = 0;
  for (std::size_t k = a; k < b;) {
    if (m.pages[k] == kLive) {
      ++k;
    } else if (m.pages[k] == kIdle) {
      m.pages[k++] = kLive;
      idle_ -= kPageBytes;
      ++made_live;
    } else {
      std::size_t j = k;
      while (j < b && m.pages[j] != kLive && m.pages[j] != kIdle) ++j;
      const std::size_t run = (j - k) * kPageBytes;
      fresh_ += run - take_spares(base + k * kPageBytes, run, true);
      for (; k < j; ++k) m.pages[k] = kLive;
      made_live += run / kPageBytes;
    }
  }
  return made_live;
}

// Live pages of [first, last) become idle; a 2 MiB page left with no live page becomes spare
// pages (a whole 2 MiB page unless pages of it were moved away).
void PoolAllocator::decommit_units(Mapped& m, std::byte* base, std::size_t first, std::size_t last) {
  constexpr std::size_t kUnitPages = kHuge / kPageBytes;
  std::size_t given = 0;
  for (std::size_t k = first; k < last; ++k)
    if (m.pages[k] == kLive) m.pages[k] = kIdle, ++given;
  mapped_live_ -= given * kPageBytes;
  live_ -= given * kPageBytes;
  idle_ += given * kPageBytes;
  for (std::size_t ua = first / kUnitPages * kUnitPages; ua < last; ua += kUnitPages) {
    const std::size_t ub = ua + kUnitPages;
    if (std::any_of(m.pages.begin() + static_cast<std::ptrdiff_t>(ua),
                    m.pages.begin() + static_cast<std::ptrdiff_t>(ub), [](PageState st) { return st == kLive; }))
      continue;
    for (std::size_t k = ua; k < ub;) {
      if (m.pages[k] != kIdle) {
        ++k;
        continue;
      }
      std::size_t j = k;
      while (j < ub && m.pages[j] == kIdle) m.pages[j++] = kSpare;
      add_spare(base + k * kPageBytes, (j - k) * kPageBytes);
      idle_ -= (j - k) * kPageBytes;
      k = j;
    }
  }
}

std::byte* PoolAllocator::allocate(std::size_t bytes) {
  DT_CHECK(bytes > 0, "zero-byte allocation");
  std::lock_guard lock(mu_);
  if (bytes < pagewise_min_bytes()) return allocate_small(bytes);  // heap or slab blocks
  std::byte* p = reserve_locked(bytes);
  commit_locked(p, 0, bytes);
  return p;
}

void PoolAllocator::move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                               std::size_t bytes) {
  std::lock_guard lock(mu_);
  DT_CHECK(bytes % kPageBytes == 0 && bytes > 0, "move of ", bytes, " bytes: not whole pages");
  DT_CHECK(from + from_offset + bytes <= to + to_offset || to + to_offset + bytes <= from + from_offset,
           "move of overlapping page ranges");
  Mapped& a = mapped_block(from, from_offset, bytes);
  Mapped& b = mapped_block(to, to_offset, bytes);
  const std::size_t fa = from_offset / kPageBytes, fb = to_offset / kPageBytes, n = bytes / kPageBytes;
  for (std::size_t k = 0; k < n; ++k) {
    DT_CHECK(a.pages[fa + k] == kLive, "move of a page that is not live");
    DT_CHECK(b.pages[fb + k] == kUntouched || b.pages[fb + k] == kMoved || b.pages[fb + k] == kIdle,
             "move onto a page that is in use");
  }
  remap_range(from + from_offset, to + to_offset, bytes);  // an idle target page is replaced (freed)
  for (std::size_t k = 0; k < n; ++k) idle_ -= b.pages[fb + k] == kIdle ? kPageBytes : 0;
  for (std::size_t k = 0; k < n; ++k) a.pages[fa + k] = kMoved, b.pages[fb + k] = kLive;
}

std::byte* PoolAllocator::reserve(std::size_t bytes) {
  std::lock_guard lock(mu_);
  return reserve_locked(bytes);
}

void PoolAllocator::commit(std::byte* base, std::size_t offset, std::size_t bytes) {
  std::lock_guard lock(mu_);
  commit_locked(base, offset, bytes);
}

void PoolAllocator::decommit(std::byte* base, std::size_t offset, std::size_t bytes) {
  std::lock_guard lock(mu_);
  Mapped& m = mapped_block(base, offset, bytes);
  DT_CHECK(bytes % kPageBytes == 0 || offset + bytes == m.asked || offset + bytes + kPageBytes > m.asked,
           "decommit of a partial page");
  const std::size_t first = offset / kPageBytes, last = round_up(offset + bytes, kPageBytes) / kPageBytes;
  if (m.huge) {
    decommit_units(m, base, first, last);
    return;
  }
  for (std::size_t i = first; i < last;) {
    if (m.pages[i] != kLive) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < last && m.pages[j] == kLive) m.pages[j++] = kSpare;
    const std::size_t run = (j - i) * kPageBytes;
    add_spare(base + i * kPageBytes, run);
    mapped_live_ -= run;
    live_ -= run;
    i = j;
  }
}

void PoolAllocator::release(std::byte* data, std::size_t bytes) {
  if (!data) return;
  std::lock_guard lock(mu_);
  auto it = mapped_.find(data);
  if (it == mapped_.end()) {
    release_small(data, bytes);
    return;
  }
  Mapped& m = it->second;
  DT_CHECK_EQ(m.bytes, block_bytes(bytes));
  for (std::size_t i = 0; i < m.pages.size();) {
    const PageState s = m.pages[i];
    std::size_t j = i;
    while (j < m.pages.size() && m.pages[j] == s) ++j;
    const std::size_t run = (j - i) * kPageBytes;
    if (s == kLive || s == kIdle) {
      add_spare(data + i * kPageBytes, run);
      (s == kLive ? mapped_live_ : idle_) -= run;
      live_ -= s == kLive ? run : 0;
    } else if (s != kSpare) {  // untouched or moved away: empty address space
      ::munmap(data + i * kPageBytes, run);
    }
    i = j;
  }
  mapped_.erase(it);
}

std::size_t PoolAllocator::prefault(std::size_t bytes) {
  std::lock_guard lock(mu_);
  const std::size_t warm = spare_ + idle_slab_bytes();  // what a commit takes before fresh pages
  if (warm >= bytes) return 0;
  // Whole pages, not whole 2 MiB pages: the pool never holds more than asked (the engine's peak);
  // make_resident_huge advises only the 2 MiB pages inside, the tail stays in 4 KiB pages.
  const std::size_t n = round_up(bytes - warm, kPageBytes);
  std::byte* p = map_untouched(n);
  // Backed with memory now, not at the switch: in huge pages with the policy on (huge pages +
  // MADV_POPULATE_WRITE is 5-20x a write a page where the kernel offers it).
  if (huge_) {
    make_resident_huge(p, n);
    populated_ += n;
  } else {  // 4 KiB pages: the faster of a populate and a write a page, never huge pages
    make_resident(p, n, fastest_small_page_way(machine_rates()));
  }
  add_spare(p, n);
  fresh_ += n;
  note_reserved();
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
      freed += free_chunk(it++, false);
    } else {
      ++it;
    }
  }
  for (auto& [p, n] : spares_) ::munmap(p, n);
  spares_.clear();
  freed += spare_;
  spare_ = 0;
  return freed;
}

void PoolAllocator::reset_peaks() {
  std::lock_guard lock(mu_);
  peak_live_ = live_;
  peak_reserved_ = reserved_locked();
}

std::size_t PoolAllocator::live_bytes() const {
  std::lock_guard l(mu_);
  return live_;
}
std::size_t PoolAllocator::peak_live() const {
  std::lock_guard l(mu_);
  return peak_live_;
}
std::size_t PoolAllocator::reserved_bytes() const {
  std::lock_guard l(mu_);
  return reserved_locked();
}
std::size_t PoolAllocator::peak_reserved() const {
  std::lock_guard l(mu_);
  return peak_reserved_;
}
std::size_t PoolAllocator::fresh_bytes() const {
  std::lock_guard l(mu_);
  return fresh_;
}
std::size_t PoolAllocator::spare_bytes() const {
  std::lock_guard l(mu_);
  return spare_;
}
std::size_t PoolAllocator::mapped_block_bytes() const {
  std::lock_guard l(mu_);
  std::size_t n = 0;
  for (const auto& [base, m] : mapped_) n += m.bytes;
  for (const auto& [id, c] : chunks_)
    n += static_cast<std::size_t>(std::count(c.resident.begin(), c.resident.end(), true)) * kHuge;
  return n;
}
std::size_t PoolAllocator::huge_page_bytes() const {
  std::vector<AddressRange> ranges;
  {
    std::lock_guard l(mu_);
    for (const auto& [base, m] : mapped_) ranges.emplace_back(base, base + m.bytes);
    for (const auto& [id, c] : chunks_)
      if (c.slab) ranges.emplace_back(c.base, c.base + c.size);
  }
  return huge_page_bytes_in(ranges);
}
std::size_t PoolAllocator::populated_bytes() const {
  std::lock_guard l(mu_);
  return populated_;
}

}  // namespace dynatrain::exec
