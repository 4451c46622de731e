// Attachments: small files a checkpoint carries beside its rank files (the Python module keeps
// its pickled step and extra state in one). Each is written atomically and fsync'd into the
// step directory before the index, and listed in the index with its bytes and XXH3-64, so a
// load checks it as it checks rank files: missing, truncated or altered -> InputError naming
// the file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dynatrain::ckpt {

struct Attachment {
  std::string name;  // a plain file name: no '/', not "index.json", not "latest", no "rank-" prefix
  std::string content;
};

// What the index says of one attachment.
struct AttachmentInfo {
  std::string name;
  std::uint64_t bytes = 0;
  std::string checksum;  // XXH3-64, 16 hex digits
};

// Writes every attachment into `step_dir` (tmp, fsync, rename) and returns the index's list of
// them. InputError for a name that is not a plain file name or is one the checkpoint uses itself.
nlohmann::json write_attachments(const std::string& step_dir, const std::vector<Attachment>& attachments);
// The index's list (absent in checkpoints without attachments: empty). Throws what
// nlohmann::json throws on a malformed list (the caller reports the index as corrupted).
std::vector<AttachmentInfo> parse_attachments(const nlohmann::json& index);
// The content of attachment `name` of the checkpoint in `step_dir`, checked against `listed`.
std::string read_attachment(const std::string& step_dir, const std::vector<AttachmentInfo>& listed,
                            const std::string& name);

}  // namespace dynatrain::ckpt
