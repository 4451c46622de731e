// Training text and the deterministic sampler of global batches.
//
// Tokens are bytes (the tiny models have vocab 256). A global batch of step t is B windows of
// L+1 bytes whose starts come from a counter-based generator: start_i = hash(seed, sample index)
// mod (len - L - 1), where the sample index counts every window drawn since step 0. The data
// position (samples drawn so far) and the seed are all the state there is, so a layout switch
// carries them in two integers and every layout reads the same windows in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dynatrain::train {

// A few KB of public-domain English text compiled into the binary (no download needed).
const std::string& embedded_text();
// The largest --data file: every rank holds the whole text.
constexpr std::uintmax_t kMaxTextFileBytes = std::uintmax_t{4} << 30;
// The bytes of `path`; throws InputError if it is not a regular file (a FIFO, a device such as
// /dev/zero), cannot be read, is larger than kMaxTextFileBytes or shorter than 2 bytes.
std::string read_text_file(const std::string& path);

struct DataCursor {
  std::uint64_t seed = 0;
  std::uint64_t position = 0;  // windows drawn so far
};

// Tokens and next-token targets of `count` windows starting at window `first`, each `seq` long,
// row-major [count, seq]. Throws InputError if the text is shorter than seq + 2 bytes.
void sample_windows(const std::string& text, const DataCursor& cursor, std::int64_t first, std::int64_t count,
                    std::int64_t seq, std::vector<std::int64_t>& tokens, std::vector<std::int64_t>& targets);

std::uint64_t mix64(std::uint64_t x);

}  // namespace dynatrain::train
