#include "ckpt/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>

#include "ckpt/file_io.h"
#include "ckpt/index.h"
#include "ckpt/safetensors.h"
#include "common/error.h"
#include "exec/box_copy.h"
#include "plan/planner.h"
#include "common/clock.h"

namespace dynatrain::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

using detail::entry_name;

namespace {

// Adds the seconds from its construction to its destruction to `total` (LoadStats' phases).
class PhaseTimer {
 public:
  explicit PhaseTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() { total_ += seconds_since(start_); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

namespace {

// A rank file opened for reading: size and header checked against the index.
struct OpenFile {
  File file;
  StHeader header;
  std::map<std::string, const StEntry*> by_name;
  json checksums;                 // entry -> one hex checksum per chunk (or one for the whole entry)
  std::uint64_t chunk_bytes = 0;  // 0: files written before chunked checksums (whole entries only)

  // Reads file bytes [offset, offset + total of `spans`) into `spans`, their pages backed by
  // memory first (populate); returns the read calls.
  int read(const std::vector<ByteSpan>& spans, std::uint64_t offset) const {
    populate(spans);
    return read_scattered(file.fd(), spans, offset, file.path());
  }
};

}  // namespace

std::string rank_file_path(const Checkpoint& c, int r) {
  const std::string path = c.step_dir + "/" + c.files.at(static_cast<std::size_t>(r)).name;
  const std::string copy = c.step_dir + "/" + copy_file_name(r);
  std::error_code ec;  // a rank file whose node is gone is read from the copy another process kept
  return !std::filesystem::exists(path, ec) && std::filesystem::exists(copy, ec) ? copy : path;
}

namespace {

std::unique_ptr<OpenFile> open_checked(const Checkpoint& c, int r) {
  const FileInfo& info = c.files.at(r);
  const std::string path = rank_file_path(c, r);
  auto f = std::make_unique<OpenFile>(OpenFile{File::open_read(path), {}, {}, {}, 0});
  const std::uint64_t bytes = f->file.size();
  if (bytes != info.bytes)
    DT_INPUT_ERROR("checkpoint file '", path, "' has ", bytes, " bytes, the index says ", info.bytes, ": ",
                   bytes < info.bytes ? "truncated" : "corrupted");
  f->header = read_header(f->file.fd(), bytes, path);
  std::string head(f->header.data_start, '\0');
  read_exact(f->file.fd(), head.data(), head.size(), 0, path);
  if (hex64(checksum(head.data(), head.size())) != info.header_checksum)
    DT_INPUT_ERROR("checkpoint file '", path, "': header checksum differs from the index: corrupted");
  for (const auto& e : f->header.entries) f->by_name[e.name] = &e;
  try {
    f->checksums = json::parse(f->header.metadata.at("checksums"));
    const auto chunk = f->header.metadata.find("chunk_bytes");
    if (chunk != f->header.metadata.end()) f->chunk_bytes = std::stoull(chunk->second);
    if (chunk != f->header.metadata.end() && f->chunk_bytes == 0) throw std::invalid_argument("chunk_bytes 0");
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint file '", path, "': no entry checksums in its header (corrupted)");
  }
  return f;
}

bool sum_missing(const json& sums, json::const_iterator it) {
  return it == sums.end() || !(it->is_string() || it->is_array());
}

// Whether bytes [lo, hi) of an entry of `bytes` bytes, read into `data`, match its checksums:
// one per chunk of `chunk` bytes (lo and hi on chunk boundaries, or hi == bytes), or, with
// chunk == 0, one for the whole entry (lo == 0, hi == bytes).
bool sums_match(const json& sums, const std::byte* data, std::uint64_t lo, std::uint64_t hi, std::uint64_t bytes,
                std::uint64_t chunk) {
  if (chunk == 0) return sums.is_string() && sums.get<std::string>() == hex64(checksum(data, bytes));
  if (sums.size() != (bytes + chunk - 1) / chunk) return false;
  for (std::uint64_t at = lo; at < hi; at += chunk) {
    const auto& sum = sums[at / chunk];
    if (!sum.is_string() || sum.get<std::string>() != hex64(checksum(data + (at - lo), std::min(chunk, bytes - at))))
      return false;
  }
  return true;
}

// The byte ranges [lo, hi) of an entry (`bytes` bytes, storage of box `sbox`) that a load of
// `pieces` reads, in file order: every contiguous run the pieces need in the
// entry's row-major storage (one per row for a split on dim 1, one in all for a split on dim 0)
// widened to whole checksum chunks of `chunk` bytes (the whole entry when chunk == 0), then
// merged with the next range when the gap between them is at most `merge_gap` bytes.
std::vector<std::pair<std::uint64_t, std::uint64_t>> read_ranges(const std::vector<const vps::Box*>& pieces,
                                                                 const vps::Box& sbox, int elem, std::uint64_t bytes,
                                                                 std::uint64_t chunk, std::uint64_t merge_gap) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs, out;
  if (bytes == 0) return out;
  if (chunk == 0) return {{0, bytes}};
  for (const vps::Box* piece : pieces)
    exec::for_each_run(*piece, 0, piece->numel(), sbox, [&](std::int64_t at, std::int64_t n) {
      const std::uint64_t lo = static_cast<std::uint64_t>(at) * elem, hi = static_cast<std::uint64_t>(at + n) * elem;
      runs.emplace_back(lo / chunk * chunk, std::min(bytes, (hi + chunk - 1) / chunk * chunk));
    });
  std::sort(runs.begin(), runs.end());
  for (const auto& run : runs) {
    if (!out.empty() && run.first <= out.back().second + merge_gap)
      out.back().second = std::max(out.back().second, run.second);
    else
      out.push_back(run);
  }
  return out;
}

// The parts of `spans` (laid end to end; span i starts at starts[i]) that hold bytes [from, to).
void parts_of(const std::vector<ByteSpan>& spans, const std::vector<std::uint64_t>& starts, std::uint64_t from,
              std::uint64_t to, std::vector<ByteRun>& out) {
  out.clear();
  std::size_t i = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), from) - starts.begin()) - 1;
  for (; i < spans.size() && starts[i] < to; ++i) {
    const std::uint64_t s = std::max(from, starts[i]), e = std::min(to, starts[i] + spans[i].bytes);
    if (e > s) out.push_back({spans[i].data + (s - starts[i]), e - s});
  }
}

// What a load reads into besides the arenas.
struct Scratch {
  std::vector<std::byte> margin;       // the chunk margins around a piece read in place
  std::unique_ptr<std::byte[]> stage;  // an entry's storage for pieces read through it
  std::uint64_t stage_bytes = 0;
};

// Reads bytes [lo, hi) of an entry straight into `outs` (laid end to end: one span where the
// piece is contiguous at its destination, one per row where it is strided there), and the rest
// of the checksum chunks that cover them (at most one chunk's worth at each end) into
// `margin`, in one read (preadv); then checks every one of those chunks. `chunk` == 0: the
// entry has one checksum (lo == 0 and hi == bytes). Returns the file bytes read and the read
// calls.
std::pair<std::uint64_t, int> read_in_place(const OpenFile& f, const StEntry& entry, const json& sums, std::uint64_t lo,
                                            std::uint64_t hi, std::uint64_t bytes, std::uint64_t chunk,
                                            const std::vector<ByteSpan>& outs, Scratch& scratch, LoadStats& stats) {
  std::vector<std::byte>& margin = scratch.margin;
  const std::uint64_t c = chunk > 0 ? chunk : bytes;
  const std::uint64_t a = lo / c * c, b = std::min(bytes, (hi + c - 1) / c * c);
  margin.resize((lo - a) + (b - hi));
  // Everything [a, b) goes into, in file order: the head margin, the piece, the tail margin.
  std::vector<ByteSpan> spans;
  spans.reserve(outs.size() + 2);
  if (lo > a) spans.push_back({margin.data(), lo - a});
  spans.insert(spans.end(), outs.begin(), outs.end());
  if (b > hi) spans.push_back({margin.data() + (lo - a), b - hi});
  std::vector<std::uint64_t> starts;
  starts.reserve(spans.size());
  std::uint64_t at = 0;
  for (const auto& s : spans) starts.push_back(at), at += s.bytes;
  DT_CHECK_EQ(at, b - a);
  const std::uint64_t base = f.header.data_start + entry.begin;
  const std::string& path = f.file.path();
  int calls = 0;
  {
    PhaseTimer timer(stats.read_seconds);
    calls = f.read(spans, base + a);
  }
  // One read over the whole range, not one a block: checking each 1 MiB while it is still in
  // cache cost more in smaller requests to the disk than it saved (54-62 % of the read probe
  // against 77-79 % with whole reads, in one loaded run each).
  PhaseTimer timer(stats.checksum_seconds);
  std::vector<ByteRun> runs;
  for (std::uint64_t u = a; u < b; u += c) {
    parts_of(spans, starts, u - a, std::min(u + c, b) - a, runs);
    const std::uint64_t sum = runs.size() == 1 ? checksum(runs[0].data, runs[0].bytes) : checksum_of_parts(runs);
    const json& want = chunk > 0 ? sums[u / c] : sums;
    if (!want.is_string() || want.get<std::string>() != hex64(sum))
      DT_INPUT_ERROR("checkpoint file '", path, "': entry '", entry.name, "' fails its checksum: corrupted");
  }
  return {b - a, calls};
}

// One entry a load reads from: pieces [first, last) of the load's sorted pieces come from it.
struct Read {
  std::size_t first = 0, last = 0;
  const OpenFile* file = nullptr;
  const StEntry* entry = nullptr;
  const vps::Segment* segment = nullptr;  // the entry's segment in the saved layout
  vps::StateKind kind{};
};

// Where a piece goes: its destination segment's storage in the rank's arenas.
struct Destinations {
  const vps::RankLayout& layout;
  const Arenas& arenas;
  std::pair<std::byte*, const vps::Segment*> of(const plan::Piece& q, int elem) const {
    const vps::LocalBuffer& dbuf = layout.buffers.at(q.dst_buffer);
    const vps::Segment& dseg = dbuf.segments.at(q.dst_segment);
    std::byte* out = arenas.of_buffer(dbuf, elem);
    DT_CHECK(out != nullptr, "no memory for a buffer of kind ", vps::state_kind_name(dbuf.kind));
    return {out + dseg.offset * elem, &dseg};
  }
};

// How one entry is read: pieces contiguous in the entry straight into place (with their
// chunks' margins), scattered over their destination's rows where they are strided there; the
// others through the stage in `ranges`.
struct Direct {
  const plan::Piece* piece;
  std::uint64_t lo, hi;        // the piece's bytes in the entry
  std::vector<ByteSpan> outs;  // where they go, in the entry's order
};

struct Work {
  std::vector<Direct> direct;
  std::vector<const plan::Piece*> staged;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;  // of the staged pieces
  const json* sums = nullptr;
  std::uint64_t chunk = 0, bytes = 0;  // chunk 0: one checksum for the entry
  int elem = 0;
};
// A file range a load will read, in order (for the prefetch window).
struct Span {
  int fd;
  std::uint64_t offset, bytes;
};

// Plans the reads of entry `r` (element size `elem`) and appends their file ranges to `spans`.
Work plan_entry(const Read& r, const std::vector<plan::Piece>& pieces, const Destinations& dsts, int elem,
                std::uint64_t merge_gap, std::uint64_t min_run, std::vector<Span>& spans) {
  Work w;
  w.elem = elem;
  w.bytes = r.entry->end - r.entry->begin;
  const auto sums = r.file->checksums.find(r.entry->name);
  if (sum_missing(r.file->checksums, sums))
    DT_INPUT_ERROR("checkpoint file '", r.file->file.path(), "': entry '", r.entry->name,
                   "' has no checksum: corrupted");
  w.sums = &*sums;
  w.chunk = sums->is_array() ? r.file->chunk_bytes : 0;
  if (w.chunk > 0 && sums->size() != (w.bytes + w.chunk - 1) / w.chunk)
    DT_INPUT_ERROR("checkpoint file '", r.file->file.path(), "': entry '", r.entry->name,
                   "' has the wrong number of checksums: corrupted");
  const vps::Box& sbox = r.segment->box;
  const std::uint64_t base = r.file->header.data_start + r.entry->begin;
  const std::uint64_t c = w.chunk > 0 ? w.chunk : std::max<std::uint64_t>(w.bytes, 1);
  std::vector<const vps::Box*> boxes;
  for (std::size_t i = r.first; i < r.last; ++i) {
    const plan::Piece& q = pieces[i];
    const std::int64_t from = exec::contiguous_offset(q.box, 0, q.box.numel(), sbox);
    const auto [out, dseg] = dsts.of(q, elem);
    const std::uint64_t lo = static_cast<std::uint64_t>(from) * elem;
    const std::uint64_t hi = lo + static_cast<std::uint64_t>(q.box.numel()) * elem;
    std::vector<ByteSpan> outs;
    if (from >= 0)  // the piece's runs at its destination, in its row-major order = the entry's
      exec::for_each_run(q.box, 0, q.box.numel(), dseg->box, [&](std::int64_t at, std::int64_t n) {
        std::byte* p = out + at * elem;
        const std::size_t len = static_cast<std::size_t>(n) * elem;
        if (!outs.empty() && outs.back().data + outs.back().bytes == p)
          outs.back().bytes += len;
        else
          outs.push_back({p, len});
      });
    if (from < 0 || (outs.size() > 1 && hi - lo < min_run * outs.size()) ||
        (w.chunk == 0 && (lo != 0 || hi != w.bytes))) {
      w.staged.push_back(&q);
      boxes.push_back(&q.box);
      continue;
    }
    w.direct.push_back({&q, lo, hi, std::move(outs)});
    const std::uint64_t a = lo / c * c, b = std::min(w.bytes, (hi + c - 1) / c * c);
    spans.push_back({r.file->file.fd(), base + a, b - a});
  }
  w.ranges = read_ranges(boxes, sbox, elem, w.bytes, w.chunk, merge_gap);
  for (const auto& [lo, hi] : w.ranges) spans.push_back({r.file->file.fd(), base + lo, hi - lo});
  return w;
}

// Keeps the kernel fetching the next `window` bytes of `spans` (in the order the load reads
// them) ahead of what the load has consumed, from a thread of its own: posix_fadvise(WILLNEED)
// blocks while it submits the reads (0.1-0.4 s a rank over 2.7 GB measured here), which would
// otherwise sit on the load's path. window 0: no prefetch.
class Prefetcher {
 public:
  Prefetcher(const std::vector<Span>& spans, std::uint64_t window) : spans_(spans), window_(window) {
    if (window > 0 && !spans.empty()) thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
  }
  // The load has read `bytes` more of the spans.
  void consumed(std::uint64_t bytes) {
    {
      std::lock_guard lock(mu_);
      consumed_ += bytes;
    }
    cv_.notify_one();
  }

 private:
  void run(std::stop_token stop) {
    std::uint64_t advised = 0;
    for (const Span& sp : spans_) {
      std::unique_lock lock(mu_);
      if (!cv_.wait(lock, stop, [&] { return advised < consumed_ + window_; })) return;  // stopped
      lock.unlock();
      advise_will_need(sp.fd, sp.offset, sp.bytes);
      advised += sp.bytes;
    }
  }

  const std::vector<Span>& spans_;
  const std::uint64_t window_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::uint64_t consumed_ = 0;
  std::jthread thread_;  // last: stopped and joined before the members above go
};

// Reads entry `r` as planned in `w`: its pieces contiguous in the entry straight into place,
// the others through `scratch.stage`, every chunk read checked; counts into `stats`.
void read_entry(const Read& r, const Work& w, const Destinations& dsts, Scratch& scratch, Prefetcher& prefetcher,
                LoadStats& stats) {
  for (const Direct& d : w.direct) {
    const auto [n, calls] =
        read_in_place(*r.file, *r.entry, *w.sums, d.lo, d.hi, w.bytes, w.chunk, d.outs, scratch, stats);
    stats.bytes_read += n;
    stats.read_calls += calls;
    stats.bytes_in_place += d.hi - d.lo;
    stats.bytes_loaded += d.hi - d.lo;
    prefetcher.consumed(n);
  }
  if (w.staged.empty()) return;
  // The stage: the size of the largest entry read through it, its pages touched only where
  // bytes are read; the entry's storage at its own offsets, so pieces copy out with its box.
  if (scratch.stage_bytes < w.bytes) {
    scratch.stage.reset(new std::byte[w.bytes]);  // default-initialised: untouched until read into
    scratch.stage_bytes = w.bytes;
  }
  std::byte* stage = scratch.stage.get();
  for (const auto& [lo, hi] : w.ranges) {
    {
      PhaseTimer timer(stats.read_seconds);
      stats.read_calls += r.file->read({{stage + lo, hi - lo}}, r.file->header.data_start + r.entry->begin + lo);
    }
    stats.bytes_read += hi - lo;
    bool ok;
    {
      PhaseTimer timer(stats.checksum_seconds);
      ok = sums_match(*w.sums, stage + lo, lo, hi, w.bytes, w.chunk);
    }
    if (!ok)
      DT_INPUT_ERROR("checkpoint file '", r.file->file.path(), "': entry '", r.entry->name,
                     "' fails its checksum: corrupted");
    prefetcher.consumed(hi - lo);
  }
  for (const plan::Piece* q : w.staged) {
    stats.bytes_loaded += static_cast<std::uint64_t>(q->box.numel() * w.elem);
    const auto [out, dseg] = dsts.of(*q, w.elem);
    PhaseTimer timer(stats.copy_seconds);
    exec::copy_box(q->box, stage, r.segment->box, out, dseg->box, w.elem);  // touches only bytes read
  }
}

}  // namespace

LoadStats load_rank(const Checkpoint& c, const vps::Layout& dst, int rank, const Arenas& arenas,
                    const LoadOptions& options) {
  LoadStats stats;
  if (!vps::rank_coords(dst.config(), rank).active) return stats;
  const auto started = std::chrono::steady_clock::now();
  std::vector<vps::StateKind> kinds;
  for (auto k : c.kinds)
    if (std::find(dst.options().kinds.begin(), dst.options().kinds.end(), k) != dst.options().kinds.end())
      kinds.push_back(k);
  for (auto k : kinds)
    if (c.elem_bytes[static_cast<int>(k)] != dst.options().elem_bytes[static_cast<int>(k)])
      DT_INPUT_ERROR("checkpoint holds ", vps::state_kind_name(k), " with ", c.elem_bytes[static_cast<int>(k)],
                     "-byte elements; this layout uses ", dst.options().elem_bytes[static_cast<int>(k)]);
  // Planning layouts: the saved one (files as ranks) and the new one, both of the kinds to load.
  vps::LayoutOptions src_options = dst.options(), dst_options = dst.options();
  src_options.kinds = dst_options.kinds = kinds;
  src_options.bucket_elems = c.bucket_elems;
  src_options.align_elems = c.align_elems;  // the saver's, whatever this layout uses
  const vps::Layout src = dst.relaid(c.config, src_options), to = dst.relaid(dst.config(), dst_options);
  const plan::Planner planner(src, to, plan::Topology{1});
  const plan::RankPlan mine = planner.plan_rank(rank);

  // Every piece this rank receives, grouped by the source segment it is read from.
  std::vector<plan::Piece> pieces = mine.keep;
  for (const auto& [peer, list] : mine.recv) pieces.insert(pieces.end(), list.begin(), list.end());
  std::sort(pieces.begin(), pieces.end(), [](const plan::Piece& a, const plan::Piece& b) {
    return std::tie(a.src_rank, a.src_buffer, a.src_segment) < std::tie(b.src_rank, b.src_buffer, b.src_segment);
  });
  const vps::RankLayout dst_layout = to.rank_layout(rank);
  std::map<int, vps::RankLayout> src_layouts;
  std::map<int, std::unique_ptr<OpenFile>> files;

  // The reads: one entry per source segment that pieces come from.
  std::vector<Read> reads;
  for (std::size_t i = 0; i < pieces.size();) {
    const plan::Piece& p = pieces[i];
    Read r;
    r.first = i;
    while (i < pieces.size() && pieces[i].src_rank == p.src_rank && pieces[i].src_buffer == p.src_buffer &&
           pieces[i].src_segment == p.src_segment)
      ++i;
    r.last = i;
    auto& sl = src_layouts.try_emplace(p.src_rank, src.rank_layout(p.src_rank)).first->second;
    auto& file = files[p.src_rank];
    if (!file) {
      PhaseTimer timer(stats.open_seconds);
      file = open_checked(c, p.src_rank);
      ++stats.files_opened;
    }
    const vps::LocalBuffer& sbuf = sl.buffers.at(p.src_buffer);
    r.segment = &sbuf.segments.at(p.src_segment);
    r.kind = sbuf.kind;
    const std::string name = entry_name(src, sbuf.kind, *r.segment);
    const auto it = file->by_name.find(name);
    if (it == file->by_name.end())
      DT_INPUT_ERROR("checkpoint file '", file->file.path(), "' lacks entry '", name,
                     "' (corrupted or another layout)");
    r.file = file.get();
    r.entry = it->second;
    reads.push_back(r);
  }
  const Destinations dsts{dst_layout, arenas};
  std::vector<Span> spans;  // the file ranges in the order they are read, for the prefetch window
  std::vector<Work> work;
  for (const Read& r : reads)
    work.push_back(plan_entry(r, pieces, dsts, dst.options().elem_bytes[static_cast<int>(r.kind)],
                              options.merge_gap_bytes, options.min_scatter_run_bytes, spans));
  stats.plan_seconds = seconds_since(started) - stats.open_seconds;

  // Prefetch: the kernel is asked for the next `prefetch_bytes` of file ranges ahead of the one
  // being read, from a thread of its own, so the disk streams while this rank checks checksums
  // and copies.
  Prefetcher prefetcher(spans, options.prefetch_bytes);

  Scratch scratch;
  for (std::size_t k = 0; k < reads.size(); ++k) read_entry(reads[k], work[k], dsts, scratch, prefetcher, stats);
  return stats;
}

void verify(const Checkpoint& c) {
  std::vector<std::byte> bytes;
  for (int r = 0; r < static_cast<int>(c.files.size()); ++r) {
    const std::unique_ptr<OpenFile> f = open_checked(c, r);
    for (const StEntry& e : f->header.entries) {
      const auto sums = f->checksums.find(e.name);
      const std::uint64_t n = e.end - e.begin;
      bytes.resize(n);
      read_exact(f->file.fd(), bytes.data(), n, f->header.data_start + e.begin, f->file.path());
      const std::uint64_t chunk = !sum_missing(f->checksums, sums) && sums->is_array() ? f->chunk_bytes : 0;
      if (sum_missing(f->checksums, sums) || !sums_match(*sums, bytes.data(), 0, n, n, chunk))
        DT_INPUT_ERROR("checkpoint file '", f->file.path(), "': entry '", e.name, "' fails its checksum: corrupted");
    }
  }
}

std::vector<std::vector<std::byte>> load_full(const Checkpoint& c, const vps::ModelSpec& model, vps::StateKind kind) {
  if (std::find(c.kinds.begin(), c.kinds.end(), kind) == c.kinds.end())
    DT_INPUT_ERROR("checkpoint '", c.step_dir, "' holds no ", vps::state_kind_name(kind), " state");
  vps::LayoutOptions options;
  options.kinds = {kind};
  options.elem_bytes = c.elem_bytes;
  vps::ParallelConfig one = vps::ParallelConfig::parse("tp=1,pp=1,dp=1,zero=0");
  one.validate_for(model);
  const vps::Layout whole(model, one, options);
  const vps::RankLayout rl = whole.rank_layout(0);
  const int elem = c.elem_bytes[static_cast<int>(kind)];
  std::int64_t numel = 0;
  for (const auto& b : rl.buffers) numel = std::max(numel, b.arena_offset + b.numel);
  std::vector<std::byte> arena(static_cast<std::size_t>(numel) * elem);
  Arenas a;
  a.data[static_cast<int>(kind)] = arena.data();
  load_rank(c, whole, 0, a);
  std::vector<std::vector<std::byte>> out(whole.tensors().size());
  for (const auto& b : rl.buffers)
    for (const auto& s : b.segments) {
      DT_CHECK(s.box == whole.tensors()[s.tensor].full_box(), "tp=1 holds whole tensors");
      const std::byte* p = arena.data() + (b.arena_offset + s.offset) * elem;
      out[s.tensor].assign(p, p + s.box.numel() * elem);
    }
  return out;
}

}  // namespace dynatrain::ckpt
