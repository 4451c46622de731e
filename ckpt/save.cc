// Saving: rank files, the save-target check, the commit (attachments, index, pointer switch)
// and the collective save that runs them in order (ckpt/checkpoint.h).
#include <algorithm>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "ckpt/index.h"
#include "ckpt/safetensors.h"
#include "common/error.h"

namespace dynatrain::ckpt {

namespace fs = std::filesystem;
using detail::check_same_tensors;
using detail::entry_name;
using detail::kFormat;
using detail::latest_name;
using detail::read_index;
using nlohmann::json;

namespace {

unsigned kind_mask(const std::vector<vps::StateKind>& kinds) {
  unsigned mask = 0;
  for (auto k : kinds) mask |= 1u << static_cast<int>(k);
  return mask;
}

json tensors_json(const std::vector<vps::TensorSpec>& tensors) {
  json out = json::array();
  for (const auto& t : tensors) out.push_back({t.name, t.shape});
  return out;
}

// Every segment of `kinds` on `rank`, with where it lies in the arenas (bytes).
struct SegmentRef {
  vps::StateKind kind;
  vps::Segment segment;
  vps::LocalBuffer buffer;        // the segment's buffer (without its segment list)
  std::uint64_t buffer_byte = 0;  // where the segment starts in it
  std::uint64_t bytes = 0;
};

std::vector<SegmentRef> rank_segments(const vps::Layout& layout, int rank, const std::vector<vps::StateKind>& kinds) {
  std::vector<SegmentRef> out;
  layout.visit_buffers(
      rank,
      [&](const vps::LocalBuffer& buf, const std::vector<vps::Segment>& segments) {
        const int elem = layout.options().elem_bytes[static_cast<int>(buf.kind)];
        for (const auto& s : segments)
          out.push_back({buf.kind, s, buf, static_cast<std::uint64_t>(s.offset * elem),
                         static_cast<std::uint64_t>(s.box.numel() * elem)});
      },
      kind_mask(kinds));
  return out;
}

}  // namespace

std::uint64_t write_rank_file(const std::string& step_dir, const vps::Layout& layout, int rank,
                              const std::vector<vps::StateKind>& kinds, const Arenas& arenas, std::uint64_t chunk_bytes,
                              FileWrite how) {
  DT_CHECK(chunk_bytes > 0, "checksum chunks of 0 bytes");
  const auto segments = rank_segments(layout, rank, kinds);
  StHeader header;
  json sums = json::object();
  for (const auto& s : segments) {
    DT_CHECK(arenas.of_buffer(s.buffer, layout.options().elem_bytes[static_cast<int>(s.kind)]) != nullptr,
             "no memory for a buffer of kind ", vps::state_kind_name(s.kind));
    StEntry e;
    e.name = entry_name(layout, s.kind, s.segment);
    e.dtype = dtype_of_size(layout.options().elem_bytes[static_cast<int>(s.kind)]);
    for (int d = 0; d < s.segment.box.ndim; ++d) e.shape.push_back(s.segment.box.extent(d));
    DT_CHECK(!sums.contains(e.name), "entry ", e.name, " twice on rank ", rank);
    // One checksum per chunk, fixed width: the header's length does not change when they are set.
    sums[e.name] = json::array();
    for (std::uint64_t c = 0; c * chunk_bytes < s.bytes; ++c) sums[e.name].push_back(std::string(16, '0'));
    header.entries.push_back(std::move(e));
  }
  header.metadata = {{"format", kFormat},
                     {"rank", std::to_string(rank)},
                     {"config", layout.config().str()},
                     {"chunk_bytes", std::to_string(chunk_bytes)},
                     {"checksums", sums.dump()}};
  std::string encoded = encode_header(header);

  const std::string path = (fs::path(step_dir) / rank_file_name(rank)).string();
  File f = how == FileWrite::kOver ? File::open_over(path) : File::create(path);
  // Data first (checksums are computed on the way), header last at the front.
  constexpr std::uint64_t kStage = 16ull << 20;
  // Bytes checksummed, then written, at a time: a multiple of the chunk that stays in a core's
  // cache between the two (one pass over the arena's memory instead of two).
  constexpr std::uint64_t kCachedBytes = 1ull << 20;
  const std::uint64_t group = std::max<std::uint64_t>(1, kCachedBytes / chunk_bytes) * chunk_bytes;
  std::vector<std::byte> stage;
  std::uint64_t stage_at = header.data_start, written = header.data_start;
  auto flush = [&] {
    if (!stage.empty()) write_exact(f.fd(), stage.data(), stage.size(), stage_at, path);
    stage.clear();
    stage_at = written;
  };
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& s = segments[i];
    const std::byte* src =
        arenas.of_buffer(s.buffer, layout.options().elem_bytes[static_cast<int>(s.kind)]) + s.buffer_byte;
    auto& chunk_sums = sums[header.entries[i].name];
    auto sum_chunks = [&](std::uint64_t from, std::uint64_t to) {  // [from, to): whole chunks but the last
      for (std::uint64_t at = from; at < to; at += chunk_bytes)
        chunk_sums[at / chunk_bytes] = hex64(checksum(src + at, std::min(chunk_bytes, to - at)));
    };
    if (s.bytes >= kStage / 4) {  // large: straight from the arena, a group of chunks at a time,
      flush();                    // written while the checksum has left them in cache
      for (std::uint64_t at = 0; at < s.bytes; at += group) {
        const std::uint64_t n = std::min(group, s.bytes - at);
        sum_chunks(at, at + n);
        write_exact(f.fd(), src + at, n, written + at, path);
      }
      written += s.bytes;
      stage_at = written;
    } else {
      sum_chunks(0, s.bytes);
      if (stage.size() + s.bytes > kStage) flush();
      stage.insert(stage.end(), src, src + s.bytes);
      written += s.bytes;
    }
  }
  flush();
  header.metadata["checksums"] = sums.dump();
  const std::string final_header = encode_header(header);
  DT_CHECK_EQ(final_header.size(), encoded.size());
  write_exact(f.fd(), final_header.data(), final_header.size(), 0, path);
  if (how == FileWrite::kOver) f.truncate(written);
  f.sync();
  return written;
}

const char* save_phase_name(SavePhase phase) {
  switch (phase) {
    case SavePhase::kBegin: return "save-begin";
    case SavePhase::kWritten: return "save-written";
    case SavePhase::kIndexed: return "save-index";
  }
  return "?";
}

void commit(const std::string& dir, std::int64_t step, const vps::Layout& layout,
            const std::vector<vps::StateKind>& kinds, const json& trainer_state,
            const std::vector<Attachment>& attachments, const std::function<void()>& before_switch) {
  const std::string name = step_dir_name(step);
  const fs::path step_dir = fs::path(dir) / name;
  json index;
  index["format"] = kFormat;
  index["model"] = layout.model().name;
  index["family"] = layout.model().family;
  index["tensors"] = tensors_json(layout.tensors());
  index["config"] = layout.config().str();
  index["bucket_elems"] = layout.options().bucket_elems;
  index["align_elems"] = layout.options().align_elems;  // page-aligned or packed: moves ZeRO shard bounds
  json kind_names = json::array(), elem = json::array();
  for (auto k : kinds) kind_names.push_back(vps::state_kind_name(k));
  for (int k = 0; k < vps::kNumStateKinds; ++k) elem.push_back(layout.options().elem_bytes[k]);
  index["kinds"] = kind_names;
  index["elem_bytes"] = elem;
  index["step"] = step;
  index["trainer"] = trainer_state;
  json files = json::array();
  for (int r = 0; r < layout.config().world_size(); ++r) {
    const std::string path = (step_dir / rank_file_name(r)).string();
    File f = File::open_read(path);
    const std::uint64_t bytes = f.size();
    const StHeader h = read_header(f.fd(), bytes, path);
    std::string head(h.data_start, '\0');
    read_exact(f.fd(), head.data(), head.size(), 0, path);
    files.push_back({{"name", rank_file_name(r)},
                     {"bytes", bytes},
                     {"header_checksum", hex64(checksum(head.data(), head.size()))}});
  }
  index["files"] = files;
  index["attachments"] = write_attachments(step_dir.string(), attachments);
  index["index_version"] = detail::kIndexVersion;
  index["checksum"] = detail::index_checksum(index);
  write_file_atomic((step_dir / "index.json").string(), index.dump(1) + "\n");
  sync_dir(step_dir.string());
  if (before_switch) before_switch();

  // The pointer switch: from here on the new checkpoint is the latest.
  const fs::path latest = fs::path(dir) / "latest";
  std::string previous;
  std::error_code ec;
  if (fs::is_regular_file(latest, ec)) {
    previous = read_small_file(latest.string(), 4096);
    while (!previous.empty() && (previous.back() == '\n' || previous.back() == ' ')) previous.pop_back();
  }
  write_file_atomic(latest.string(), name + "\n");
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("step-", 0) == 0 && n != name && n != previous) fs::remove_all(entry.path(), ec);
  }
}

void on_all_ranks(comm::Transport& world, const std::string& what, const std::function<void()>& work) {
  std::string error;
  try {
    work();
  } catch (const Error& e) {
    error = e.what();
  }
  float failed = error.empty() ? 0.f : 1.f;
  world.all_reduce_sum(&failed, 1);
  if (failed == 0) return;
  // Every rank throws the lowest failing rank's message, so the job's one line (rank 0's) names
  // the cause wherever it happened (a damaged file of rank 2 is found on rank 2 alone).
  const std::vector<std::string> errors = comm::all_gather_strings(world, error);
  int first = 0;
  while (errors[static_cast<std::size_t>(first)].empty()) ++first;
  if (first == world.rank()) throw InputError(error);
  DT_INPUT_ERROR(what, " failed on rank ", first, ": ", errors[static_cast<std::size_t>(first)]);
}

void save(const std::string& dir, std::int64_t step, const vps::Layout& layout,
          const std::vector<vps::StateKind>& kinds, const Arenas& arenas, const json& trainer_state,
          comm::Transport& world, const SaveObserver& observer) {
  auto observe = [&](SavePhase phase) {
    if (observer) observer(phase, world.rank());
  };
  const fs::path step_dir = fs::path(dir) / step_dir_name(step);
  on_all_ranks(world, "checkpoint save", [&] {
    if (world.rank() != 0) return;
    check_save_target(dir, step, layout);
    begin_save(dir, step);
  });
  on_all_ranks(world, "checkpoint save", [&] {
    observe(SavePhase::kBegin);
    if (world.rank() < layout.config().world_size()) {
      write_rank_file(step_dir.string(), layout, world.rank(), kinds, arenas);
      observe(SavePhase::kWritten);
    }
  });
  on_all_ranks(world, "checkpoint save", [&] {
    if (world.rank() == 0) commit(dir, step, layout, kinds, trainer_state, {}, [&] { observe(SavePhase::kIndexed); });
  });
}

void check_save_target(const std::string& dir, std::int64_t step, const vps::Layout& layout) {
  const std::string name = latest_name(dir);
  if (name.empty()) return;
  if (name == step_dir_name(step))
    DT_INPUT_ERROR("checkpoint directory '", dir, "' already holds step ", step, " as its latest");
  const std::string step_dir = (fs::path(dir) / name).string();
  try {
    check_same_tensors(read_index(step_dir + "/index.json"), step_dir, layout.tensors(), layout.model().name);
  } catch (const InputError& e) {
    DT_INPUT_ERROR(e.what(), "; save into another directory");
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint index '", step_dir, "/index.json' is corrupted: ", e.what(),
                   "; save into another directory");
  }
}

std::string begin_save(const std::string& dir, std::int64_t step) {
  const fs::path step_dir = fs::path(dir) / step_dir_name(step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) DT_INPUT_ERROR("cannot create checkpoint directory '", dir, "': ", ec.message());
  fs::remove_all(step_dir, ec);  // a save of this step that never completed
  fs::create_directories(step_dir, ec);
  if (ec) DT_INPUT_ERROR("cannot create '", step_dir.string(), "': ", ec.message());
  sync_dir(dir);
  return step_dir.string();
}

std::string recycle_save(const std::string& dir, std::int64_t step) {
  const std::string name = step_dir_name(step);
  const std::string latest = latest_name(dir);
  std::string oldest;
  for (const std::string& n : step_dirs(dir))
    if (n != latest && n != name && (oldest.empty() || n < oldest)) oldest = n;
  if (oldest.empty()) return begin_save(dir, step);
  const fs::path step_dir = fs::path(dir) / name;
  std::error_code ec;
  fs::remove_all(step_dir, ec);  // a save of this step that never completed
  fs::rename(fs::path(dir) / oldest, step_dir, ec);
  if (ec) DT_INPUT_ERROR("cannot rename '", oldest, "' to '", step_dir.string(), "': ", ec.message());
  fs::remove(step_dir / "index.json", ec);  // not a checkpoint until the commit writes it again
  sync_dir(dir);
  return step_dir.string();
}

}  // namespace dynatrain::ckpt
