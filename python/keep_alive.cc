#include "python/keep_alive.h"

#include "common/error.h"

namespace dynatrain::python {

KeepAliveAllocator::~KeepAliveAllocator() {
  for (auto& [base, bytes] : deferred_) pool_.release(base, bytes);
}

std::shared_ptr<void> KeepAliveAllocator::pin(std::byte* base, std::size_t bytes) {
  DT_CHECK(base != nullptr && bytes > 0, "pin of an empty buffer");
  {
    std::lock_guard lock(mu_);
    ++pins_[base];
  }
  return std::shared_ptr<void>(base, [this](void* p) { unpin(static_cast<std::byte*>(p)); });
}

void KeepAliveAllocator::unpin(std::byte* base) {
  std::size_t bytes = 0;
  {
    std::lock_guard lock(mu_);
    auto it = pins_.find(base);
    DT_CHECK(it != pins_.end(), "unpin of a block that is not pinned");
    if (--it->second > 0) return;
    pins_.erase(it);
    auto d = deferred_.find(base);
    if (d == deferred_.end()) return;
    bytes = d->second;
    deferred_.erase(d);
  }
  pool_.release(base, bytes);
}

std::size_t KeepAliveAllocator::pinned_blocks() const {
  std::lock_guard lock(mu_);
  return pins_.size();
}

std::size_t KeepAliveAllocator::deferred_bytes() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [base, bytes] : deferred_) n += bytes;
  return n;
}

void KeepAliveAllocator::release(std::byte* data, std::size_t bytes) {
  if (!data) return;
  {
    std::lock_guard lock(mu_);
    if (pins_.count(data)) {
      deferred_.emplace(data, bytes);
      return;
    }
  }
  pool_.release(data, bytes);
}

bool KeepAliveAllocator::can_adopt() const {
  std::lock_guard lock(mu_);
  return pins_.empty() && pool_.can_adopt();
}

bool KeepAliveAllocator::can_move_pages() const {
  std::lock_guard lock(mu_);
  return pins_.empty() && pool_.can_move_pages();
}

void KeepAliveAllocator::decommit(std::byte* base, std::size_t offset, std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (pins_.count(base)) return;  // stays live until the deferred release
  }
  pool_.decommit(base, offset, bytes);
}

}  // namespace dynatrain::python
