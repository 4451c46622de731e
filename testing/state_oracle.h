// The state oracle for tests and benchmarks: allocate a rank's state filled with the content
// oracle (testing/fill.h), verify every element after a switch, release it, and measure the
// point-to-point bandwidth that lower bounds are computed from. Used by `dynatrain
// run-transition`, tests/exec and bench/.
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
void release_all(const vps::Layout& model_layout, const vps::RankLayout& layout,
                 std::vector<std::byte*>& bufs, exec::StateAllocator& alloc);
// Number of buffers with a wrong element; the first wrong one described in `first` if given.
// Buffers of the kinds in `zeroed_kinds` (bit k = StateKind k; exec::TransitionOptions) must be
// all zero instead.
int verify_state(const vps::Layout& model_layout, const vps::RankLayout& layout,
                 const std::vector<std::byte*>& bufs, std::string* first = nullptr,
                 std::uint32_t zeroed_kinds = 0);

// Collective: every pair (r, r^1) exchanges `bytes` both ways at once, `iters` times after one
// warm-up. Returns the highest per-rank receive rate in bytes/s (equal on every rank; 0 when
// no rank has a partner).
double measure_p2p_bandwidth(comm::Transport& world, std::size_t bytes, int iters = 3);

// Collective: what the link alone does with a switch's bytes. Every rank exchanges with each
// peer of the XOR order (the engine's) as many bytes as it sends to / receives from it
// (`send_bytes[q]`, `recv_bytes[q]`), as plain messages of at most `chunk` bytes, two in
// flight, from and into warm buffers: no packing, no state, no allocation. Returns the
// slowest rank's seconds (equal on every rank).
double measure_plain_exchange(comm::Transport& world, const std::vector<std::uint64_t>& send_bytes,
                              const std::vector<std::uint64_t>& recv_bytes, std::size_t chunk);

// Collective: every rank's value, exact (comm::all_gather_values).
std::vector<std::uint64_t> gather_u64(comm::Transport& world, std::uint64_t value);
std::vector<double> gather_double(comm::Transport& world, double value);

}  // namespace dynatrain::testing
