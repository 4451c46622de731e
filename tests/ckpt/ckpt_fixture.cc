#include "tests/ckpt/ckpt_fixture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "testing/fill.h"

namespace dynatrain::ckpt {

namespace fs = std::filesystem;

vps::LayoutOptions options() {
  vps::LayoutOptions o;
  o.kinds = vps::parse_state_kinds("param,master,exp_avg,exp_avg_sq");
  o.bucket_elems = 3000;  // several buckets, uneven ZeRO shards
  return o;
}

vps::Layout layout(const std::string& model, const std::string& config) {
  auto c = vps::ParallelConfig::parse(config);
  const auto m = vps::model_from_name(model);
  c.validate_for(m);
  return vps::Layout(m, c, options());
}

namespace {

// Removes the checkpoints this process wrote when it exits.
struct ScratchDirs {
  std::vector<std::string> dirs;
  ~ScratchDirs() {
    std::error_code ignored;
    for (const auto& d : dirs) fs::remove_all(d, ignored);
  }
};

}  // namespace

std::string fresh_dir(const std::string& name) {
  static ScratchDirs scratch;
  // The pid keeps two checkouts' suites (or two ctest runs) on one machine out of each other's files.
  const std::string dir = ::testing::TempDir() + "dt_ckpt_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(dir);
  scratch.dirs.push_back(dir);
  return dir;
}

vps::ModelSpec tiny_deepseek() {
  vps::ModelSpec m = vps::model_from_name("tiny-moe");
  m.name = "tiny-deepseek";
  m.family = "deepseek_v3";
  m.qk_norm = false;
  m.heads = m.kv_heads = 4;
  m.kv_lora_rank = 12, m.qk_nope_dim = 8, m.qk_rope_dim = 4, m.v_head_dim = 6, m.head_dim = 12;
  m.q_lora_rank = 10;
  m.shared_expert_ffn = 16;
  m.router_bias = true;
  m.ffn = 48;
  m.dense_layers = {0};
  return m;
}

OwnedArenas allocate(const vps::Layout& layout, int rank) {
  OwnedArenas a;
  for (const auto& b : layout.rank_layout(rank).buffers) {
    auto& v = a.kind[static_cast<int>(b.kind)];
    const std::size_t end =
        static_cast<std::size_t>(b.arena_offset + b.numel) * layout.options().elem_bytes[static_cast<int>(b.kind)];
    v.resize(std::max(v.size(), end));
  }
  return a;
}

OwnedArenas filled(const vps::Layout& layout, int rank) {
  OwnedArenas a = allocate(layout, rank);
  for (const auto& b : layout.rank_layout(rank).buffers) {
    const int elem = layout.options().elem_bytes[static_cast<int>(b.kind)];
    testing::fill_buffer(layout.tensors(), b, elem, a.kind[static_cast<int>(b.kind)].data() + b.arena_offset * elem);
  }
  return a;
}

void save_filled(const std::string& dir, std::int64_t step, const vps::Layout& layout, std::uint64_t chunk_bytes,
                 const std::vector<Attachment>& attachments) {
  const std::string step_dir = dir + "/" + step_dir_name(step);
  std::filesystem::create_directories(step_dir);
  for (int r = 0; r < layout.config().world_size(); ++r) {
    OwnedArenas a = filled(layout, r);
    write_rank_file(step_dir, layout, r, layout.options().kinds, a.view(), chunk_bytes);
  }
  commit(dir, step, layout, layout.options().kinds, {{"note", "filled"}}, attachments);
}

}  // namespace dynatrain::ckpt
