// The safetensors file format, as far as checkpoints and export need it.
//
// A file is: 8 bytes little-endian N, N bytes of JSON header (padded with spaces to a multiple
// of 8), then the data section. The header maps each entry name to {"dtype", "shape",
// "data_offsets": [begin, end)} (bytes into the data section, entries back to back in header
// order, covering the section exactly) and may hold "__metadata__", a map of strings.
// Readers refuse with InputError naming the file: a file shorter than its header says, a header
// that is not such a JSON object, offsets outside the data section or overlapping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dynatrain::ckpt {

struct StEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", "U8", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // bytes into the data section
};

struct StHeader {
  std::vector<StEntry> entries;                 // in data order
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::uint64_t data_start = 0;                 // 8 + header length
  std::uint64_t data_bytes = 0;                 // end of the last entry
};

// Bytes per element of a safetensors dtype; throws InputError for an unknown one.
int dtype_bytes(const std::string& dtype);
// The dtype string of an element size used here (4: F32, 2: BF16, 1: U8).
std::string dtype_of_size(int bytes);

// Assigns back-to-back offsets in entry order and returns the encoded header (length prefix
// included, padded to a multiple of 8). `data_start` and `data_bytes` of `header` are set.
std::string encode_header(StHeader& header);

// Reads and validates the header of the open file `fd` of `file_bytes` bytes. `path` names
// the file in errors.
StHeader read_header(int fd, std::uint64_t file_bytes, const std::string& path);

}  // namespace dynatrain::ckpt
