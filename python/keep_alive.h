// KeepAliveAllocator: the Manager's allocator during a switch. It forwards to the pool, except
// for blocks that a Python view still references (pinned): their memory is never given back,
// re-used or remapped while pinned, so a tensor derived from a handed-out view can at worst
// read the bytes it had (or zeros where the engine moved pages away); it can never read or write
// another tensor's state and never touch unmapped memory. A pinned block the switch releases is
// given back to the pool when its last pin goes.
//
// Invariants:
//  * pin(p) is taken per exported buffer (python/lease_bindings.cc); the token's destruction
//    unpins. Blocks are keyed by their base address (what allocate() returned).
//  * While any block is pinned, can_adopt() and can_move_pages() are false, so the engine never
//    hands a pinned source over as a destination nor moves its pages out; decommit() of a
//    pinned block does nothing (its pages stay live until the deferred release).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

#include "exec/pool_allocator.h"

namespace dynatrain::python {

class KeepAliveAllocator final : public exec::StateAllocator {
 public:
  explicit KeepAliveAllocator(exec::PoolAllocator& pool) : pool_(pool) {}
  ~KeepAliveAllocator() override;
  KeepAliveAllocator(const KeepAliveAllocator&) = delete;
  KeepAliveAllocator& operator=(const KeepAliveAllocator&) = delete;

  // Pins block `base` (`bytes` long) until the returned token is destroyed. The allocator must
  // outlive every token (the Manager owns it; a lease holds the Manager).
  std::shared_ptr<void> pin(std::byte* base, std::size_t bytes);
  std::size_t pinned_blocks() const;
  std::size_t deferred_bytes() const;  // released by a switch, held for a pin

  std::byte* allocate(std::size_t bytes) override { return pool_.allocate(bytes); }
  void release(std::byte* data, std::size_t bytes) override;
  std::size_t pagewise_min_bytes() const override { return pool_.pagewise_min_bytes(); }
  bool can_adopt() const override;
  bool can_move_pages() const override;
  bool huge_pages() const override { return pool_.huge_pages(); }
  void move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                  std::size_t bytes) override {
    pool_.move_pages(from, from_offset, to, to_offset, bytes);
  }
  std::byte* reserve(std::size_t bytes) override { return pool_.reserve(bytes); }
  void commit(std::byte* base, std::size_t offset, std::size_t bytes) override { pool_.commit(base, offset, bytes); }
  void decommit(std::byte* base, std::size_t offset, std::size_t bytes) override;

 private:
  void unpin(std::byte* base);

  exec::PoolAllocator& pool_;
  mutable std::mutex mu_;
  std::map<std::byte*, int> pins_;              // base -> live tokens
  std::map<std::byte*, std::size_t> deferred_;  // released while pinned: base -> bytes
};

}  // namespace dynatrain::python
