// Checkpoints: a layout whose holders are files.
//
// Directory layout (one checkpoint = one new directory; the last complete one is never touched):
//   DIR/latest                                  name of the last complete checkpoint, switched
//                                               atomically (write latest.tmp, fsync, rename, fsync DIR)
//   DIR/step-00000010/rank-00003.safetensors    every segment rank 3 holds of the saved kinds,
//                                               one entry each, named "<kind>/<tensor>/<lo>-<hi>"
//                                               (the VPS box), checksums in "__metadata__"
//   DIR/step-00000010/index.json                model tensors, saved layout (config, bucket size,
//                                               kinds, element sizes), each file's bytes and
//                                               header checksum, step and trainer state
// A save writes and fsyncs every rank file and the index into the new directory before the
// pointer switch, then removes checkpoints older than the previous one.
//
// Loading into any layout and process count is a switch from the saved layout to the new one
// planned by plan::Planner, with file r standing in for source rank r: each rank of the new
// layout plans its own part (plan_rank) and reads the pieces it receives straight from the
// files, so ranks read in parallel. Every entry read is checked against its checksum; a file
// whose size or header disagrees with the index is refused (InputError naming the file).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/attachment.h"
#include "comm/transport.h"
#include "vps/layout.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

namespace dynatrain::ckpt {

// Where one rank's state lives. Either one arena per kind (`data`, indexed by StateKind, buffers
// at vps::LocalBuffer::arena_offset; nullptr for kinds the rank does not have), or, when
// `buffer` is set, one block per buffer (the trainer's pool-backed state): buffer(b) is the
// start of b's b.numel elements. Element sizes come from the layout's options.
struct Arenas {
  std::array<std::byte*, vps::kNumStateKinds> data{};
  std::function<std::byte*(const vps::LocalBuffer&)> buffer;
  std::byte* of(vps::StateKind k) const { return data[static_cast<int>(k)]; }
  // Start of buffer `b` (elements of `elem` bytes); nullptr when the rank has no memory for it.
  std::byte* of_buffer(const vps::LocalBuffer& b, int elem) const {
    if (buffer) return buffer(b);
    std::byte* base = of(b.kind);
    return base ? base + b.arena_offset * elem : nullptr;
  }
};

std::string step_dir_name(std::int64_t step);  // "step-00000010"
std::string rank_file_name(int rank);          // "rank-00003.safetensors"
// A copy of rank file `rank` kept by another process (job/memory_copy.h): the same bytes, so the
// index's size and header checksum hold for it. A load reads it where the rank file is missing.
std::string copy_file_name(int rank);  // "rank-00003.copy.safetensors"

// ---- saving ----
// Every entry is checksummed in chunks of this many bytes (the last one shorter; XXH3-64 each),
// so that a load that needs only part of an entry reads and verifies only the chunks it covers.
// 256 KiB: fine enough that a dim-0 half of a 1.5 MB entry is read as a half, coarse enough
// that the checksums are ~0.01 % of the file (19 header bytes a chunk).
constexpr std::uint64_t kChecksumChunkBytes = std::uint64_t{256} << 10;

// How a rank file is written: into a new file, or over the one already there (cut to its new
// length at the end), so that a copy rewritten every step in shared memory writes pages tmpfs
// already holds instead of touching fresh ones (0.25-2 GB/s, 5-50x slower than warm memory).
enum class FileWrite { kNew, kOver };
// Writes and fsyncs `rank`'s file of `kinds` into `step_dir`; returns its bytes. Not collective.
std::uint64_t write_rank_file(const std::string& step_dir, const vps::Layout& layout, int rank,
                              const std::vector<vps::StateKind>& kinds, const Arenas& arenas,
                              std::uint64_t chunk_bytes = kChecksumChunkBytes, FileWrite how = FileWrite::kNew);
// The phases of a save, in order, as reported to a SaveObserver on the rank where they happen
// (a test hook: `dynatrain train` lets job/fault_injection.h kill a rank there).
//   kBegin    every rank, before it writes its rank file
//   kWritten  every rank of the layout, after its rank file is written and fsync'd
//   kIndexed  rank 0, after the index is written and fsync'd, before `latest` is switched
enum class SavePhase { kBegin, kWritten, kIndexed };
const char* save_phase_name(SavePhase phase);  // "save-begin", "save-written", "save-index"
using SaveObserver = std::function<void(SavePhase phase, int rank)>;

// Rank 0 of a save, before anything is written (reads only): refuses (InputError) a `dir`
// whose latest checkpoint was saved for a model whose tensors differ from `layout`'s, cannot be
// read, or already is step `step` (its directory would be replaced).
void check_save_target(const std::string& dir, std::int64_t step, const vps::Layout& layout);
// Rank 0 of a save, after check_save_target: creates DIR/step_dir_name(step) empty (removing
// what a save of this step that never completed left there) and returns its path.
std::string begin_save(const std::string& dir, std::int64_t step);

// As begin_save, but the new directory is the oldest step directory of DIR that `latest` does
// not name, renamed (its files stay, to be written over with FileWrite::kOver), when DIR has
// one; so DIR holds two step directories whose pages are reused save after save.
std::string recycle_save(const std::string& dir, std::int64_t step);

// After every rank of `layout` wrote its file into DIR/step_dir_name(step): writes the
// attachments and the index, switches DIR/latest to it and removes checkpoints older than the
// previous one. One process; `before_switch` (if set) runs between the index and the pointer switch.
void commit(const std::string& dir, std::int64_t step, const vps::Layout& layout,
            const std::vector<vps::StateKind>& kinds, const nlohmann::json& trainer_state,
            const std::vector<Attachment>& attachments = {}, const std::function<void()>& before_switch = {});
// Collective over `world` (ranks outside the layout pass empty arenas): the whole save.
// A process that dies at any point leaves `latest` naming the previous complete checkpoint.
void save(const std::string& dir, std::int64_t step, const vps::Layout& layout,
          const std::vector<vps::StateKind>& kinds, const Arenas& arenas, const nlohmann::json& trainer_state,
          comm::Transport& world, const SaveObserver& observer = {});

// Collective over `world`: runs `work` on every rank and rethrows on every rank if it threw on
// any, so that no rank is left waiting in a later collective: the failing rank its own
// InputError, the others "<what> failed on rank R: <its message>" (R the lowest failing rank).
void on_all_ranks(comm::Transport& world, const std::string& what, const std::function<void()>& work);

// ---- loading ----
struct FileInfo {
  std::string name;
  std::uint64_t bytes = 0;
  std::string header_checksum;
};

// A checkpoint whose index was read and checked against a model.
struct Checkpoint {
  std::string step_dir;
  std::int64_t step = 0;
  vps::ParallelConfig config;
  std::int64_t bucket_elems = 0;
  std::int64_t align_elems = 1;  // the saved layout's tensor alignment (vps::LayoutOptions)
  std::vector<vps::StateKind> kinds;
  vps::ElemBytes elem_bytes{};
  std::vector<FileInfo> files;              // file r holds source rank r
  nlohmann::json trainer;                   // opaque trainer state saved with it
  std::vector<AttachmentInfo> attachments;  // read them with read_attachment(step_dir, attachments, name)
};

// The checkpoint DIR/latest points to. Throws InputError when there is none, or when it was
// saved for a model whose tensors differ from `model`'s (naming the first difference).
Checkpoint open_latest(const std::string& dir, const vps::ModelSpec& model);
// The same for a layout of the caller's own tensors (vps::Layout's second constructor): the
// saved tensors must equal `tensors` (names and shapes, in order). Whether the saved config
// suits them is checked when a load builds the saved layout.
Checkpoint open_latest(const std::string& dir, const std::vector<vps::TensorSpec>& tensors,
                       const std::string& model_name);
// The checkpoint DIR/`name` (a step directory's name), checked as open_latest checks DIR/latest's.
Checkpoint open_step(const std::string& dir, const std::string& name, const vps::ModelSpec& model);
// The index of DIR/`name` (a step directory's name), read and checked (format, its checksum)
// but not against a model: InputError naming it when it cannot be read.
nlohmann::json read_step_index(const std::string& dir, const std::string& name);
// The step directory DIR/latest names ("" when there is none); InputError when latest is damaged.
std::string latest_step_name(const std::string& dir);
// The step directories of DIR (names "step-*"), oldest first.
std::vector<std::string> step_dirs(const std::string& dir);
// Replaces DIR/latest atomically with `name` (a step directory of DIR): a fall back to an
// older complete checkpoint.
void point_latest(const std::string& dir, const std::string& name);

// The file a load reads for saved rank `rank`: its rank file, or its copy (copy_file_name) when
// the rank file is missing and the copy is there.
std::string rank_file_path(const Checkpoint& ckpt, int rank);

// Reads every byte of every rank file of `ckpt` and checks it as a load would (size and header
// against the index, every chunk against its checksum); InputError naming the first file that
// fails. Not collective.
void verify(const Checkpoint& ckpt);

// How a load reads an entry of which it needs only part (ckpt/README.md, "Partial reads"):
// it reads the checksum chunks that cover the contiguous runs its pieces need (rows of a split
// on dim 0; a column block of each row for a split on dim 1), and merges two such ranges into
// one read when the gap between them is at most merge_gap_bytes. The rule trades bytes read for
// read calls: a gap under 1 MiB costs less to read (about 1 ms at 1 GB/s) than a separate
// request on a cold disk does to issue and wait for, and readahead fetches small gaps anyway.
// So a dim-1 split whose rows are narrow (a row-parallel weight: rows of 1-16 KiB) is read as
// whole rows, and one whose column block per row is over 1 MiB is read block by block.
constexpr std::uint64_t kReadMergeGapBytes = std::uint64_t{1} << 20;
struct LoadOptions {
  std::uint64_t merge_gap_bytes = kReadMergeGapBytes;
  // File bytes the kernel is asked to fetch ahead of the read in progress (posix_fadvise
  // WILLNEED, from a thread of the load's own), so that the disk streams while the rank checks
  // checksums and copies; 0: none.
  std::uint64_t prefetch_bytes = std::uint64_t{64} << 20;
  // A piece contiguous in its entry but strided at its destination (a column block of a
  // row-parallel weight loaded into a coarser tp split) is read straight into its destination
  // rows (one preadv over them) when its rows average at least this many bytes; narrower rows
  // are read into a stage and copied, as pieces strided in their entry always are.
  std::uint64_t min_scatter_run_bytes = 512;
};

struct LoadStats {
  std::uint64_t bytes_read = 0;      // file bytes read: of each entry, the checksum chunks covering
                                     // the runs the pieces need, gaps up to merge_gap_bytes included
  std::int64_t read_calls = 0;       // reads issued (one per merged range)
  std::uint64_t bytes_loaded = 0;    // bytes written into the arenas
  std::uint64_t bytes_in_place = 0;  // of bytes_loaded, read straight into the arenas (no copy)
  std::int64_t files_opened = 0;
  // Where the load's time went on this rank (wall seconds, adding up to about its whole time):
  double plan_seconds = 0;      // planning the pieces and the reads (plan_rank, read ranges)
  double open_seconds = 0;      // opening rank files and checking their headers against the index
  double read_seconds = 0;      // waiting in pread (disk, page cache copy, faults of fresh memory)
  double checksum_seconds = 0;  // XXH3 of every chunk read
  double copy_seconds = 0;      // copying staged pieces into place (exec::copy_box)
};

// Fills `rank`'s arenas of `dst` for every kind both the checkpoint and `dst` hold. Not
// collective: each rank of the new layout calls it for itself. Element sizes must match.
LoadStats load_rank(const Checkpoint& ckpt, const vps::Layout& dst, int rank, const Arenas& arenas,
                    const LoadOptions& options = {});

// The full tensors of `kind` (each tensor unsharded, row-major, element bytes of the kind),
// assembled through the same planner as a load into one rank holding everything.
std::vector<std::vector<std::byte>> load_full(const Checkpoint& ckpt, const vps::ModelSpec& model, vps::StateKind kind);

}  // namespace dynatrain::ckpt
