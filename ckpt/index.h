// The checkpoint directory's names and index, shared by saving (save.cc) and loading
// (checkpoint.cc); index.cc defines them. Not part of ckpt/'s interface (checkpoint.h is).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vps/layout.h"

namespace dynatrain::ckpt::detail {

constexpr const char* kFormat = "dynatrain-checkpoint-1";
constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{256} << 20;
// The index's own version: 2 adds "index_version" and "checksum" (the XXH3-64 of the index
// without its "checksum" field, written compactly with sorted keys: index_checksum). An index
// without both was written before checksums and is read unchecked; one with a version but no
// checksum, or whose checksum differs, is refused.
constexpr int kIndexVersion = 2;

// The safetensors entry name of one segment: "<kind>/<tensor>/<lo>-<hi>" (its VPS box).
std::string entry_name(const vps::Layout& layout, vps::StateKind kind, const vps::Segment& s);
// The name DIR/latest holds ("" when there is no latest file); InputError when it is not a
// checkpoint name.
std::string latest_name(const std::string& dir);
// The checksum field of `index` (which must not hold one yet): 16 hex digits.
std::string index_checksum(const nlohmann::json& index);
// The parsed index at `index_path`; InputError naming it when unreadable, not kFormat, or its
// checksum differs (an edited or damaged index).
nlohmann::json read_index(const std::string& index_path);
// InputError unless the index's tensors equal `tensors` (names and shapes, in order).
void check_same_tensors(const nlohmann::json& index, const std::string& step_dir,
                        const std::vector<vps::TensorSpec>& tensors, const std::string& model_name);

}  // namespace dynatrain::ckpt::detail
