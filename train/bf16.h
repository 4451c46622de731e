// bf16 <-> fp32 for the trainer's --bf16 state (torch-free): a bf16 value is the upper 16 bits
// of an fp32 one. fp32 -> bf16 rounds to nearest, ties to even (NaN stays a quiet NaN), as
// torch's c10::BFloat16 does; bf16 -> fp32 is exact, so a bf16 tensor gathered as floats is
// bit-comparable.
#pragma once

#include <cstdint>
#include <cstring>

namespace dynatrain::train {

inline std::uint16_t bf16_from_float(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float float_from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline void to_bf16(const float* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_from_float(in[i]);
}

}  // namespace dynatrain::train
