// Human-readable byte sizes: parse "256MiB" / "1GB" / "4096" and format 1536 -> "1.50 KiB".
#pragma once

#include <cstdint>
#include <string>

namespace dynatrain {

// Accepts an integer with an optional suffix B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB,
// GB, TB (powers of 1000), case-insensitive, up to kMaxBytes. Throws InputError naming the
// value otherwise (overflow included: a size never wraps).
inline constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 60;
std::uint64_t parse_bytes(const std::string& text);

std::string format_bytes(double bytes);

}  // namespace dynatrain
