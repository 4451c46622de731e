// XXH3-64 compiled for AVX2 (checksum_avx2.cc, the only file built with -mavx2): 2-3x the
// portable build's speed, the same values (XXH3's output does not depend on the instruction
// set). checksum() and checksum_of_parts() (file_io.h) call these where the CPU has AVX2.
// The .cc includes nothing but xxhash.h and this header, so that no inline C++ code compiled
// with AVX2 can be chosen by the linker for callers on other CPUs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dynatrain::ckpt::detail {

struct Run {
  const void* data;
  std::size_t bytes;
};

std::uint64_t xxh3_avx2(const void* data, std::size_t bytes);
// The XXH3-64 of `n` runs laid end to end.
std::uint64_t xxh3_runs_avx2(const Run* runs, std::size_t n);

}  // namespace dynatrain::ckpt::detail
