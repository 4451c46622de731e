// The state transition engine: executes one rank's part of a plan on rank-local buffers.
//
//   pack      every piece for one peer is copied (strided box copy) into one contiguous buffer
//   exchange  in the XOR pairwise order: step s = 1 .. 2^ceil(log2 W) - 1, peer = rank XOR s
//             (peers >= W skipped); pairs are symmetric so a blocking sendrecv cannot deadlock
//   unpack    received bytes are copied into destination buffers; keeps are local copies
//
// Memory: transfers are cut into chunks so that staging never exceeds `mem_budget`; a source
// buffer is given back to the allocator as soon as everything it must send or keep has been
// packed or copied; a destination buffer is asked for when it is first written. Peak state
// memory per rank stays within max(source, destination) + budget (exec/README.md explains when).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "plan/plan.h"
#include "vps/layout.h"

namespace dynatrain::exec {

// Where state buffers come from and go back to. Every call is accounted by the implementation.
class StateAllocator {
 public:
  virtual ~StateAllocator() = default;
  virtual std::byte* allocate(std::size_t bytes) = 0;
  virtual void release(std::byte* data, std::size_t bytes) = 0;
};

struct TransitionOptions {
  std::size_t mem_budget = 256ull << 20;  // bytes of staging at most
  bool allow_broadcast = true;            // use a broadcast where the cost model prefers it
};

struct TransitionStats {
  double seconds = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0, bytes_kept = 0;
  std::uint64_t messages = 0;        // point-to-point messages sent by this rank
  std::uint64_t broadcasts = 0;      // broadcast collectives this rank took part in
  std::uint64_t staging_bytes = 0;   // staging actually allocated (<= mem_budget)
};

// Runs `plan` (this rank's part) . `src[i]` is the data of src_layout.buffers[i] (nullptr if
// the rank holds none); every one of them is released through `alloc` before return and set to
// nullptr. On return `dst[i]` holds dst_layout.buffers[i], allocated through `alloc`.
// `elem_bytes` gives the element size of each state kind (vps::LayoutOptions::elem_bytes).
TransitionStats run_transition(const plan::RankPlan& plan, const vps::RankLayout& src_layout,
                               std::vector<std::byte*>& src, const vps::RankLayout& dst_layout,
                               std::vector<std::byte*>& dst,
                               const std::array<int, vps::kNumStateKinds>& elem_bytes,
                               comm::Transport& transport, StateAllocator& alloc,
                               const TransitionOptions& options = {});

}  // namespace dynatrain::exec
