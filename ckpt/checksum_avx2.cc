// XXH3-64 for AVX2 CPUs (checksum_avx2.h): the whole of xxHash inlined into this file, built
// with -mavx2 so that XXH3 takes its AVX2 path.
#include "ckpt/checksum_avx2.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace dynatrain::ckpt::detail {

std::uint64_t xxh3_avx2(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

std::uint64_t xxh3_runs_avx2(const Run* runs, std::size_t n) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  for (std::size_t i = 0; i < n; ++i) XXH3_64bits_update(&state, runs[i].data, runs[i].bytes);
  return XXH3_64bits_digest(&state);
}

}  // namespace dynatrain::ckpt::detail
