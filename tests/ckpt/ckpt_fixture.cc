#include "tests/ckpt/ckpt_fixture.h"

#include <algorithm>
#include <filesystem>

#include "testing/fill.h"

namespace dynatrain::ckpt {

OwnedArenas allocate(const vps::Layout& layout, int rank) {
  OwnedArenas a;
  for (const auto& b : layout.rank_layout(rank).buffers) {
    auto& v = a.kind[static_cast<int>(b.kind)];
    const std::size_t end = static_cast<std::size_t>(b.arena_offset + b.numel) *
                            layout.options().elem_bytes[static_cast<int>(b.kind)];
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
