#include "ckpt/attachment.h"

#include <algorithm>
#include <filesystem>

#include "ckpt/file_io.h"
#include "common/error.h"

namespace dynatrain::ckpt {

namespace {

void check_name(const std::string& name) {
  const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                     name.find('\0') == std::string::npos;
  if (!plain || name == "index.json" || name == "latest" || name.rfind("rank-", 0) == 0 ||
      (name.size() >= 4 && name.compare(name.size() - 4, 4, ".tmp") == 0))
    DT_INPUT_ERROR("checkpoint attachment name '", name,
                   "' is not a plain file name of its own (no '/', not index.json, latest, rank-*, *.tmp)");
}

}  // namespace

nlohmann::json write_attachments(const std::string& step_dir, const std::vector<Attachment>& attachments) {
  nlohmann::json listed = nlohmann::json::array();
  for (const Attachment& a : attachments) {
    check_name(a.name);
    for (const auto& before : listed)
      if (before.at("name") == a.name) DT_INPUT_ERROR("checkpoint attachment '", a.name, "' given twice");
    write_file_atomic((std::filesystem::path(step_dir) / a.name).string(), a.content);
    listed.push_back({{"name", a.name},
                      {"bytes", a.content.size()},
                      {"checksum", hex64(checksum(a.content.data(), a.content.size()))}});
  }
  return listed;
}

std::vector<AttachmentInfo> parse_attachments(const nlohmann::json& index) {
  std::vector<AttachmentInfo> out;
  if (!index.contains("attachments")) return out;
  for (const auto& a : index.at("attachments"))
    out.push_back(
        {a.at("name").get<std::string>(), a.at("bytes").get<std::uint64_t>(), a.at("checksum").get<std::string>()});
  return out;
}

std::string read_attachment(const std::string& step_dir, const std::vector<AttachmentInfo>& listed,
                            const std::string& name) {
  const auto it = std::find_if(listed.begin(), listed.end(), [&](const AttachmentInfo& a) { return a.name == name; });
  if (it == listed.end()) DT_INPUT_ERROR("checkpoint '", step_dir, "' has no attachment '", name, "'");
  const std::string path = (std::filesystem::path(step_dir) / name).string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    DT_INPUT_ERROR("checkpoint file '", path, "' is missing (the index lists it)");
  File f = File::open_read(path);
  const std::uint64_t bytes = f.size();
  if (bytes != it->bytes)
    DT_INPUT_ERROR("checkpoint file '", path, "' has ", bytes, " bytes, the index says ", it->bytes, ": ",
                   bytes < it->bytes ? "truncated" : "corrupted");
  std::string content(bytes, '\0');
  read_exact(f.fd(), content.data(), content.size(), 0, path);
  if (hex64(checksum(content.data(), content.size())) != it->checksum)
    DT_INPUT_ERROR("checkpoint file '", path, "' fails its checksum: corrupted");
  return content;
}

}  // namespace dynatrain::ckpt
