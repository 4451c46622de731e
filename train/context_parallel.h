// Context parallelism (cp > 1) in the trainer: which sequence positions a cp rank holds
// (torch-free; used by the model, the data split and the logits probe).
//
// Load-balanced causal split (Megatron's): each sequence of `seq` tokens is cut into 2*cp equal
// chunks and cp rank i holds chunks i and 2*cp-1-i, so every rank has the same share of the
// causal attention's work. The rank's local positions are those two chunks in order.
#pragma once

#include <cstdint>
#include <vector>

namespace dynatrain::train {

// The global positions (0 .. seq-1) of cp rank `cp_rank`'s local tokens, in local order;
// seq % (2 * cp) == 0 (checked by the trainer). cp == 1: 0 .. seq-1.
inline std::vector<std::int64_t> cp_positions(int cp_rank, int cp, std::int64_t seq) {
  std::vector<std::int64_t> out;
  if (cp == 1) {
    for (std::int64_t p = 0; p < seq; ++p) out.push_back(p);
    return out;
  }
  const std::int64_t chunk = seq / (2 * cp);
  for (std::int64_t c : {static_cast<std::int64_t>(cp_rank), static_cast<std::int64_t>(2 * cp - 1 - cp_rank)})
    for (std::int64_t p = c * chunk; p < (c + 1) * chunk; ++p) out.push_back(p);
  return out;
}

}  // namespace dynatrain::train
