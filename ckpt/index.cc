#include "ckpt/index.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "common/error.h"

namespace dynatrain::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string box_text(const vps::Box& b) {
  std::string lo, hi;
  for (int d = 0; d < b.ndim; ++d) {
    lo += (d ? "," : "") + std::to_string(b.lo[d]);
    hi += (d ? "," : "") + std::to_string(b.hi[d]);
  }
  return lo + "-" + hi;
}

}  // namespace

namespace detail {

std::string entry_name(const vps::Layout& layout, vps::StateKind kind, const vps::Segment& s) {
  return std::string(vps::state_kind_name(kind)) + "/" + layout.tensors()[s.tensor].name + "/" + box_text(s.box);
}

std::string latest_name(const std::string& dir) {
  const fs::path latest = fs::path(dir) / "latest";
  std::error_code ec;
  if (!fs::is_regular_file(latest, ec)) return "";
  std::string name = read_small_file(latest.string(), 4096);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step-", 0) != 0 || name.find('/') != std::string::npos)
    DT_INPUT_ERROR("'", latest.string(), "' is corrupted: '", name, "' is not a checkpoint name");
  return name;
}

std::string index_checksum(const json& index) {
  DT_CHECK(!index.contains("checksum"), "an index checksum over its own checksum");
  const std::string text = index.dump();  // compact; nlohmann's objects keep their keys sorted
  return hex64(checksum(text.data(), text.size()));
}

json read_index(const std::string& index_path) {
  json index;
  try {
    index = json::parse(read_small_file(index_path, kMaxIndexBytes));
    if (index.at("format").get<std::string>() != kFormat)
      DT_INPUT_ERROR("'", index_path, "' is not a ", kFormat, " index");
    if (index.contains("checksum") || index.contains("index_version")) {
      if (!index.contains("checksum"))
        DT_INPUT_ERROR("checkpoint index '", index_path,
                       "' has no checksum (its index_version needs one): edited or damaged");
      const std::string want = index.at("checksum").get<std::string>();
      index.erase("checksum");
      if (index_checksum(index) != want)
        DT_INPUT_ERROR("checkpoint index '", index_path, "' fails its checksum: edited or damaged");
      if (index.at("index_version").get<int>() > kIndexVersion)
        DT_INPUT_ERROR("checkpoint index '", index_path, "' has index_version ", index.at("index_version").get<int>(),
                       "; this build reads up to ", kIndexVersion);
    }
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint index '", index_path, "' is corrupted: ", e.what());
  }
  return index;
}

void check_same_tensors(const json& index, const std::string& step_dir, const std::vector<vps::TensorSpec>& tensors,
                        const std::string& model_name) {
  const auto& saved = index.at("tensors");
  for (std::size_t i = 0; i < std::max(saved.size(), tensors.size()); ++i) {
    const bool same = i < saved.size() && i < tensors.size() && saved[i].at(0) == tensors[i].name &&
                      saved[i].at(1).get<std::vector<std::int64_t>>() == tensors[i].shape;
    if (!same)
      DT_INPUT_ERROR("checkpoint '", step_dir, "' was saved for model '", index.value("model", "?"),
                     "', which differs from '", model_name, "' at tensor ", i, " (",
                     i < saved.size() ? saved[i].dump() : "none", " vs ",
                     i < tensors.size() ? json{tensors[i].name, tensors[i].shape}.dump() : "none", ")");
  }
}

}  // namespace detail

using namespace detail;

std::string step_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file_name(int rank) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

std::string copy_file_name(int rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rank-%05d.copy.safetensors", rank);
  return buf;
}

namespace {

Checkpoint open_named(const std::string& dir, const std::string& name, const std::vector<vps::TensorSpec>& tensors,
                      const std::string& model_name) {
  Checkpoint c;
  c.step_dir = (fs::path(dir) / name).string();
  const std::string index_path = c.step_dir + "/index.json";
  const json index = read_index(index_path);
  try {
    c.step = index.at("step").get<std::int64_t>();
    c.config = vps::ParallelConfig::parse(index.at("config").get<std::string>());
    c.bucket_elems = index.at("bucket_elems").get<std::int64_t>();
    c.align_elems = index.value("align_elems", std::int64_t{1});  // absent: saved packed
    if (c.align_elems < 1) throw std::out_of_range("align_elems");
    std::string kinds;
    for (const auto& k : index.at("kinds")) kinds += (kinds.empty() ? "" : ",") + k.get<std::string>();
    c.kinds = vps::parse_state_kinds(kinds);
    const auto elem = index.at("elem_bytes").get<std::vector<int>>();
    if (elem.size() != vps::kNumStateKinds) throw std::out_of_range("elem_bytes");
    std::copy(elem.begin(), elem.end(), c.elem_bytes.begin());
    for (const auto& f : index.at("files"))
      c.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<std::uint64_t>(),
                         f.at("header_checksum").get<std::string>()});
    c.trainer = index.at("trainer");
    c.attachments = parse_attachments(index);
    check_same_tensors(index, c.step_dir, tensors, model_name);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint index '", index_path, "' is corrupted: ", e.what());
  }
  if (static_cast<int>(c.files.size()) != c.config.world_size())
    DT_INPUT_ERROR("checkpoint index '", index_path, "' lists ", c.files.size(), " files for ", c.config.world_size(),
                   " ranks (corrupted)");
  return c;
}

}  // namespace

Checkpoint open_latest(const std::string& dir, const std::vector<vps::TensorSpec>& tensors,
                       const std::string& model_name) {
  const std::string name = latest_name(dir);
  if (name.empty())
    DT_INPUT_ERROR("'", dir,
                   "' holds no complete checkpoint (no 'latest' file); give a directory a checkpoint was saved into");
  return open_named(dir, name, tensors, model_name);
}

Checkpoint open_step(const std::string& dir, const std::string& name, const vps::ModelSpec& model) {
  Checkpoint c = open_named(dir, name, vps::build_tensors(model), model.name);
  vps::ParallelConfig check = c.config;
  check.validate_for(model);
  return c;
}

Checkpoint open_latest(const std::string& dir, const vps::ModelSpec& model) {
  const std::string name = latest_name(dir);
  if (name.empty()) return open_latest(dir, vps::build_tensors(model), model.name);  // the refusal
  return open_step(dir, name, model);
}

std::string latest_step_name(const std::string& dir) { return latest_name(dir); }

json read_step_index(const std::string& dir, const std::string& name) {
  return read_index((fs::path(dir) / name / "index.json").string());
}

std::vector<std::string> step_dirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0 && e.is_directory(ec)) out.push_back(n);
  }
  std::sort(out.begin(), out.end());  // fixed-width step numbers: by name is by step
  return out;
}

void point_latest(const std::string& dir, const std::string& name) {
  write_file_atomic((fs::path(dir) / "latest").string(), name + "\n");
}

}  // namespace dynatrain::ckpt
