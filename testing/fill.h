// The content oracle: every element of every state buffer is a pure function of
// (tensor id, state kind, global row-major index in the unsharded tensor). Filling the source
// state with it and checking the destination state against it catches any misrouted byte.
// Used by the tests, the CLI's run-transition and the benchmark.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vps/layout.h"

namespace dynatrain::testing {

// The 32-bit word for one element; an element of e bytes (2 or 4) stores its low e bytes.
inline std::uint32_t fill_word(std::uint32_t tensor, vps::StateKind kind, std::int64_t index) {
  const std::uint32_t seed = (tensor + 1) * 0x9E3779B9u ^ (static_cast<std::uint32_t>(kind) + 1) * 0x85EBCA6Bu;
  const std::uint64_t x = static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  return seed ^ static_cast<std::uint32_t>(x >> 29) ^ static_cast<std::uint32_t>(index);
}

// Writes every segment element of `buf` (padding is left alone) into `data`.
// `tensors` is the model's tensor list (vps::Layout::tensors()), `elem` 2 or 4.
void fill_buffer(const std::vector<vps::TensorSpec>& tensors, const vps::LocalBuffer& buf, int elem, std::byte* data);

struct Mismatch {
  std::uint32_t tensor = 0;
  vps::StateKind kind = vps::StateKind::kParam;
  std::int64_t global_index = 0;
  std::uint32_t expected = 0, actual = 0;
  std::string str(const std::vector<vps::TensorSpec>& tensors) const;
};

// Checks every segment element of `buf`; returns the first wrong one.
std::optional<Mismatch> verify_buffer(const std::vector<vps::TensorSpec>& tensors, const vps::LocalBuffer& buf,
                                      int elem, const std::byte* data);

}  // namespace dynatrain::testing
