#include "ckpt/safetensors.h"

#include <unistd.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "ckpt/file_io.h"
#include "common/error.h"

namespace dynatrain::ckpt {

namespace {
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;  // the format's own limit
}

int dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  DT_INPUT_ERROR("unknown safetensors dtype '", dtype, "'; valid: F64, F32, F16, BF16, I64..I8, U64..U8, BOOL");
}

std::string dtype_of_size(int bytes) {
  switch (bytes) {
    case 4: return "F32";
    case 2: return "BF16";
    case 1: return "U8";
    default: DT_INPUT_ERROR("no safetensors dtype for elements of ", bytes, " bytes");
  }
}

std::string encode_header(StHeader& header) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!header.metadata.empty()) j["__metadata__"] = header.metadata;
  std::uint64_t offset = 0;
  for (auto& e : header.entries) {
    std::int64_t numel = 1;
    for (auto s : e.shape) numel *= s;
    e.begin = offset;
    e.end = offset + static_cast<std::uint64_t>(numel) * dtype_bytes(e.dtype);
    offset = e.end;
    j[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  header.data_start = 8 + text.size();
  header.data_bytes = offset;
  std::string out(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

StHeader read_header(int fd, std::uint64_t file_bytes, const std::string& path) {
  if (file_bytes < 8) DT_INPUT_ERROR("checkpoint file '", path, "' has ", file_bytes, " bytes: truncated");
  unsigned char len[8];
  read_exact(fd, len, 8, 0, path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes || 8 + n > file_bytes)
    DT_INPUT_ERROR("checkpoint file '", path, "': header length ", n, " exceeds the file's ", file_bytes,
                   " bytes: truncated or not safetensors");
  std::string text(n, '\0');
  read_exact(fd, text.data(), n, 8, path);
  StHeader h;
  h.data_start = 8 + n;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    DT_INPUT_ERROR("checkpoint file '", path, "': header is not valid JSON (corrupted): ", e.what());
  }
  if (!j.is_object()) DT_INPUT_ERROR("checkpoint file '", path, "': header is not a JSON object (corrupted)");
  try {
    for (const auto& [key, value] : j.items()) {
      if (key == "__metadata__") {
        for (const auto& [mk, mv] : value.items()) h.metadata[mk] = mv.get<std::string>();
        continue;
      }
      StEntry e;
      e.name = key;
      e.dtype = value.at("dtype").get<std::string>();
      e.shape = value.at("shape").get<std::vector<std::int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1]) throw std::out_of_range("data_offsets");
      e.begin = offsets[0];
      e.end = offsets[1];
      std::uint64_t numel = 1;
      for (auto s : e.shape) {
        if (s < 0) throw std::out_of_range("shape");
        numel *= static_cast<std::uint64_t>(s);
      }
      if (numel * dtype_bytes(e.dtype) != e.end - e.begin) throw std::out_of_range("shape vs data_offsets");
      h.entries.push_back(std::move(e));
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint file '", path, "': malformed header entry (corrupted): ", e.what());
  }
  std::sort(h.entries.begin(), h.entries.end(), [](const StEntry& a, const StEntry& b) { return a.begin < b.begin; });
  std::uint64_t expect = 0;
  for (const auto& e : h.entries) {
    if (e.begin != expect)
      DT_INPUT_ERROR("checkpoint file '", path, "': entry '", e.name, "' starts at byte ", e.begin,
                     " of the data, expected ", expect, " (corrupted)");
    expect = e.end;
  }
  h.data_bytes = expect;
  if (h.data_start + h.data_bytes != file_bytes)
    DT_INPUT_ERROR("checkpoint file '", path, "' has ", file_bytes, " bytes, its header says ",
                   h.data_start + h.data_bytes, ": ",
                   file_bytes < h.data_start + h.data_bytes ? "truncated" : "trailing garbage");
  return h;
}

}  // namespace dynatrain::ckpt
