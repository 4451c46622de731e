// Filled checkpoints for the ckpt tests: every rank of a layout holds the content oracle
// (testing/fill.h), written as files and committed as a checkpoint, without a transport.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "vps/layout.h"
#include "vps/model_spec.h"

namespace dynatrain::ckpt {

// One rank's arenas, one byte vector per state kind sized by the layout.
struct OwnedArenas {
  std::vector<std::vector<std::byte>> kind = std::vector<std::vector<std::byte>>(vps::kNumStateKinds);
  Arenas view() {
    Arenas a;
    for (int k = 0; k < vps::kNumStateKinds; ++k) a.data[k] = kind[k].empty() ? nullptr : kind[k].data();
    return a;
  }
};

// The ckpt tests' layout options: param, master and both moments; 3000-element buckets (several
// buckets, uneven ZeRO shards).
vps::LayoutOptions options();
// `config` of preset `model`, validated for it, with options().
vps::Layout layout(const std::string& model, const std::string& config);
// An empty scratch directory named after `name` and this process; removed when the process exits.
std::string fresh_dir(const std::string& name);
// A tiny DeepSeek-style model: MLA with a query low-rank projection, shared experts, router
// bias and a dense first layer (the tensors the trainer does not run but checkpoints carry).
vps::ModelSpec tiny_deepseek();

OwnedArenas allocate(const vps::Layout& layout, int rank);
// Fills every segment of `rank` with the oracle.
OwnedArenas filled(const vps::Layout& layout, int rank);
// Saves `layout` (all ranks filled with the oracle) as checkpoint `step` of `dir`, entries
// checksummed in chunks of `chunk_bytes`, with `attachments`.
void save_filled(const std::string& dir, std::int64_t step, const vps::Layout& layout,
                 std::uint64_t chunk_bytes = kChecksumChunkBytes, const std::vector<Attachment>& attachments = {});

}  // namespace dynatrain::ckpt
