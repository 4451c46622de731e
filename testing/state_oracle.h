// The state oracle for tests and benchmarks: allocate a rank's state filled with the content
// oracle (testing/fill.h), verify every element after a switch, release it. Used by `dynatrain
// run-transition`, tests/exec and bench/. (The link probes that lower bounds are computed from
// are product code: comm/probe.h, exec/probe.h.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "exec/engine.h"
#include "vps/layout.h"

namespace dynatrain::testing {

// Allocates every buffer of `layout` from `alloc` and fills it (padding zeroed).
std::vector<std::byte*> allocate_filled(const vps::Layout& model_layout, const vps::RankLayout& layout,
                                        exec::StateAllocator& alloc);
// Releases every non-null buffer and sets it to nullptr.
void release_all(const vps::Layout& model_layout, const vps::RankLayout& layout, std::vector<std::byte*>& bufs,
                 exec::StateAllocator& alloc);
// Number of buffers with a wrong element; the first wrong one described in `first` if given.
// Buffers of the kinds in `zeroed_kinds` (bit k = StateKind k; exec::TransitionOptions) must be
// all zero instead.
int verify_state(const vps::Layout& model_layout, const vps::RankLayout& layout, const std::vector<std::byte*>& bufs,
                 std::string* first = nullptr, std::uint32_t zeroed_kinds = 0);

// Collective: every rank's value, exact (comm::all_gather_values).
std::vector<std::uint64_t> gather_u64(comm::Transport& world, std::uint64_t value);
std::vector<double> gather_double(comm::Transport& world, double value);

}  // namespace dynatrain::testing
