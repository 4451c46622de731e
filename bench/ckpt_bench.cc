// Checkpoint benchmark: save and resume through ckpt/ against this machine's fsync'd write and
// cold read bandwidth measured in the same run, and an online switch against checkpoint-restart
// of the same switch, restart included.
//
//   mpirun -np 4 bench_ckpt [--restart-s S] [--quick]   (bench/run_ckpt_bench.sh runs it)
//   mpirun -np 4 bench_ckpt --restart-probe              (MPI start-up and exit only)
//
// Model: Llama-style, hidden 1024, 6 layers, 16 heads, 4 kv heads, ffn 2816, vocab 32000:
// 133M parameters, 2.1 GB of state (bf16 param and grad, fp32 master, exp_avg, exp_avg_sq).
//   write bandwidth  every rank writes its segments (the bytes its checkpoint file holds) from
//                    the same memory to one plain file and fsyncs it, all ranks at once:
//                    total bytes / slowest rank
//   read bandwidth   every rank reads that file back into place after dropping it from the
//                    page cache (posix_fadvise DONTNEED after fsync), all at once; and again
//                    into fresh memory (never touched: its pages are faulted in by the read,
//                    as in a restarted process), the limit of a resume into fresh memory.
//                    Each both ways: through the page cache (one pread a memory run) and past
//                    it (O_DIRECT, 64 MiB requests into one aligned buffer, no copy); the limit
//                    is the faster of the two (neither way is the disk's limit alone here)
//   save             ckpt::save: rank files, index, pointer switch, every fsync
//   resume           ckpt::load_rank of every rank after dropping the files from the page
//                    cache, into the saved layout (pure I/O) and into another layout
//   online switch    exec::run_transition of the same switch (cold: fresh destination memory)
//   ckpt-restart     save + process restart (--restart-s: a separately timed mpirun of this
//                    binary that only starts MPI and exits, a floor for a real restart) + load
//                    into fresh memory in the new layout
// Every loaded and switched element is verified against the content oracle.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "exec/engine.h"
#include "exec/pool_allocator.h"
#include "plan/planner.h"
#include "testing/fill.h"
#include "testing/state_oracle.h"
#include "common/clock.h"

namespace dt = dynatrain;

namespace {

using dt::Clock;
using dt::seconds_since;

double max_over_ranks(dt::comm::Transport& t, double v) {
  const auto all = dt::testing::gather_double(t, v);
  return *std::max_element(all.begin(), all.end());
}

std::uint64_t sum_over_ranks(dt::comm::Transport& t, std::uint64_t v) {
  std::uint64_t s = 0;
  for (auto x : dt::testing::gather_u64(t, v)) s += x;
  return s;
}

dt::vps::ModelSpec bench_model(bool quick) {
  dt::vps::ModelSpec m;
  m.name = quick ? "llama-1024x2" : "llama-1024x6";
  m.hidden = 1024, m.layers = quick ? 2 : 6, m.heads = 16, m.kv_heads = 4, m.head_dim = 64;
  m.ffn = 2816, m.vocab = 32000;
  return m;
}

// One rank's state as one contiguous arena per kind (vps::LocalBuffer::arena_offset).
struct Arena {
  std::unique_ptr<std::byte[]> data;
  std::size_t size = 0;
};
struct KindArenas {
  std::vector<Arena> kind = std::vector<Arena>(dt::vps::kNumStateKinds);
  dt::ckpt::Arenas view() {
    dt::ckpt::Arenas a;
    for (int k = 0; k < dt::vps::kNumStateKinds; ++k) a.data[k] = kind[k].data.get();
    return a;
  }
  std::uint64_t bytes() const {
    std::uint64_t n = 0;
    for (const auto& v : kind) n += v.size;
    return n;
  }
};

// `touch`: zero every byte now; otherwise the pages stay untouched until written (fresh
// memory, as in a restarted process: large allocations are fresh mappings).
KindArenas allocate(const dt::vps::Layout& l, const dt::vps::RankLayout& rl, bool touch) {
  KindArenas a;
  for (const auto& b : rl.buffers) {
    auto& size = a.kind[static_cast<int>(b.kind)].size;
    size = std::max<std::size_t>(
        size, static_cast<std::size_t>(b.arena_offset + b.numel) * l.options().elem_bytes[static_cast<int>(b.kind)]);
  }
  for (auto& k : a.kind) {
    if (k.size == 0) continue;
    k.data.reset(new std::byte[k.size]);  // default-initialised: not touched
    if (touch) std::memset(k.data.get(), 0, k.size);
  }
  return a;
}

void fill(const dt::vps::Layout& l, const dt::vps::RankLayout& rl, KindArenas& a) {
  for (const auto& b : rl.buffers) {
    const int e = l.options().elem_bytes[static_cast<int>(b.kind)];
    dt::testing::fill_buffer(l.tensors(), b, e, a.kind[static_cast<int>(b.kind)].data.get() + b.arena_offset * e);
  }
}

int verify(const dt::vps::Layout& l, const dt::vps::RankLayout& rl, const KindArenas& a, const char* what, int me) {
  for (const auto& b : rl.buffers) {
    const int e = l.options().elem_bytes[static_cast<int>(b.kind)];
    if (auto bad = dt::testing::verify_buffer(l.tensors(), b, e,
                                              a.kind[static_cast<int>(b.kind)].data.get() + b.arena_offset * e)) {
      std::fprintf(stderr, "[rank %d] %s: %s\n", me, what, bad->str(l.tensors()).c_str());
      return 1;
    }
  }
  return 0;
}

void drop_from_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// The memory runs a rank's checkpoint file holds: its segments, adjacent ones merged.
std::vector<std::pair<std::byte*, std::size_t>> segment_runs(const dt::vps::Layout& l, const dt::vps::RankLayout& rl,
                                                             KindArenas& a) {
  std::vector<std::pair<std::byte*, std::size_t>> runs;
  for (const auto& b : rl.buffers) {
    const int e = l.options().elem_bytes[static_cast<int>(b.kind)];
    for (const auto& s : b.segments) {
      std::byte* p = a.kind[static_cast<int>(b.kind)].data.get() + (b.arena_offset + s.offset) * e;
      const std::size_t n = static_cast<std::size_t>(s.box.numel()) * e;
      if (!runs.empty() && runs.back().first + runs.back().second == p)
        runs.back().second += n;
      else
        runs.emplace_back(p, n);
    }
  }
  return runs;
}

// The disk's limits for exactly the bytes of a save: every rank writes its segments from the
// same memory to one plain file and fsyncs it (no header, checksums or index), then reads them
// back into place after dropping the file from the page cache, then (dropped again) into fresh,
// never-touched memory as a restarted process would; all ranks at once. Returns {write, read,
// read into fresh memory} bandwidth in bytes/s over all ranks.
struct DiskLimits {
  double write = 0, read = 0, read_fresh = 0;
  double read_cached = 0, read_direct = 0, fresh_cached = 0, fresh_direct = 0;  // the two ways
};

// Reads the whole file `path` (`bytes` bytes) with O_DIRECT into `into` (aligned, at least
// `bytes` rounded up to kDirectAlignBytes), in 64 MiB requests; false where O_DIRECT is refused.
bool read_whole_direct(const std::string& path, std::byte* into, std::size_t bytes) {
  auto f = dt::ckpt::File::open_read_direct(path);
  if (!f) return false;
  constexpr std::size_t kRequest = std::size_t{64} << 20;
  const std::size_t end =
      (bytes + dt::ckpt::kDirectAlignBytes - 1) / dt::ckpt::kDirectAlignBytes * dt::ckpt::kDirectAlignBytes;
  for (std::size_t at = 0; at < bytes;) {
    const ssize_t n = ::pread(f->fd(), into + at, std::min(kRequest, end - at), static_cast<off_t>(at));
    if (n <= 0) DT_INPUT_ERROR("direct read of '", path, "' failed at byte ", at);
    at += static_cast<std::size_t>(n);
  }
  return true;
}
DiskLimits disk_bandwidth(dt::comm::Transport& t, const std::vector<std::pair<std::byte*, std::size_t>>& runs,
                          const std::string& dir) {
  const std::string path = dir + "/raw-" + std::to_string(t.rank()) + ".bin";
  std::size_t bytes = 0;
  t.barrier();
  auto t0 = Clock::now();
  {
    dt::ckpt::File f = dt::ckpt::File::create(path);
    for (const auto& [p, n] : runs) dt::ckpt::write_exact(f.fd(), p, n, bytes, path), bytes += n;
    f.sync();
  }
  dt::ckpt::sync_dir(dir);
  const double write_s = max_over_ranks(t, seconds_since(t0));
  drop_from_cache(path);
  t.barrier();
  t0 = Clock::now();
  {
    dt::ckpt::File f = dt::ckpt::File::open_read(path);
    std::size_t at = 0;
    for (const auto& [p, n] : runs) dt::ckpt::read_exact(f.fd(), p, n, at, path), at += n;
  }
  const double read_s = max_over_ranks(t, seconds_since(t0));
  drop_from_cache(path);
  t.barrier();
  t0 = Clock::now();
  {
    std::unique_ptr<std::byte[]> fresh(new std::byte[bytes]);  // default-initialised: untouched
    dt::ckpt::File f = dt::ckpt::File::open_read(path);
    dt::ckpt::read_exact(f.fd(), fresh.get(), bytes, 0, path);
  }
  const double fresh_s = max_over_ranks(t, seconds_since(t0));
  // Past the page cache: into pre-touched memory, then into fresh memory.
  bool direct = true;
  double direct_s = 0, direct_fresh_s = 0;
  {
    dt::ckpt::AlignedBuffer touched(bytes + dt::ckpt::kDirectAlignBytes);
    std::memset(touched.data(), 0, touched.size());
    drop_from_cache(path);
    t.barrier();
    t0 = Clock::now();
    direct = read_whole_direct(path, touched.data(), bytes);
    direct_s = max_over_ranks(t, seconds_since(t0));
  }
  {
    dt::ckpt::AlignedBuffer fresh(bytes + dt::ckpt::kDirectAlignBytes);  // untouched
    t.barrier();
    t0 = Clock::now();
    direct = read_whole_direct(path, fresh.data(), bytes) && direct;
    direct_fresh_s = max_over_ranks(t, seconds_since(t0));
  }
  const bool all_direct = sum_over_ranks(t, direct ? 0 : 1) == 0;
  std::filesystem::remove(path);
  const double total = static_cast<double>(sum_over_ranks(t, bytes));
  DiskLimits l;
  l.write = total / write_s;
  l.read_cached = total / read_s, l.fresh_cached = total / fresh_s;
  if (all_direct) l.read_direct = total / direct_s, l.fresh_direct = total / direct_fresh_s;
  l.read = std::max(l.read_cached, l.read_direct), l.read_fresh = std::max(l.fresh_cached, l.fresh_direct);
  return l;
}

struct LoadResult {
  double seconds = 0;
  std::uint64_t read = 0, loaded = 0;  // over all ranks
  std::uint64_t calls = 0;             // read calls over all ranks
  std::uint64_t in_place = 0;          // bytes read straight into place (no staging copy)
};

LoadResult timed_load(dt::comm::Transport& t, const std::string& dir, const dt::vps::Layout& dst, KindArenas& arenas) {
  // Cold: every file of the checkpoint dropped from the page cache first.
  const auto c0 = dt::ckpt::open_latest(dir, dst.model());
  for (std::size_t f = t.rank(); f < c0.files.size(); f += t.size())
    drop_from_cache(c0.step_dir + "/" + c0.files[f].name);
  t.barrier();
  const auto t0 = Clock::now();
  const auto c = dt::ckpt::open_latest(dir, dst.model());
  dt::ckpt::LoadOptions options;
  if (std::getenv("DT_PREFETCH_MIB"))
    options.prefetch_bytes = std::strtoull(std::getenv("DT_PREFETCH_MIB"), nullptr, 10) << 20;
  const auto stats = dt::ckpt::load_rank(c, dst, t.rank(), arenas.view(), options);
  const double mine = seconds_since(t0);
  LoadResult r;
  r.seconds = max_over_ranks(t, seconds_since(t0));
  r.read = sum_over_ranks(t, stats.bytes_read);
  r.loaded = sum_over_ranks(t, stats.bytes_loaded);
  r.calls = sum_over_ranks(t, static_cast<std::uint64_t>(stats.read_calls));
  r.in_place = sum_over_ranks(t, stats.bytes_in_place);
  if (std::getenv("DT_BENCH_VERBOSE")) {  // where each rank's time went (LoadStats' phases)
    const double phases[] = {
        mine, stats.plan_seconds, stats.open_seconds, stats.read_seconds, stats.checksum_seconds, stats.copy_seconds};
    std::vector<std::vector<double>> all;
    for (double v : phases) all.push_back(dt::testing::gather_double(t, v));
    if (t.rank() == 0)
      for (int q = 0; q < t.size(); ++q)
        std::fprintf(
            stderr,
            "  load into %s, rank %d: %.3f s = plan %.3f + open %.3f + read %.3f + checksum %.3f + copy %.3f + other\n",
            dst.config().str().c_str(), q, all[0][q], all[1][q], all[2][q], all[3][q], all[4][q], all[5][q]);
  }
  return r;
}

// The command line: `--quick` (the 2-layer model), `--restart-s S` (a measured restart, counted
// in the checkpoint-restart row), `--restart-probe` (start MPI and exit; what --restart-s times).
struct Options {
  bool quick = false;
  bool restart_probe = false;
  double restart_s = -1;  // < 0: no restart measured
};

// Arguments are read in order; `--restart-probe` ends the reading (as it ends the run).
Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--restart-probe") {
      o.restart_probe = true;
      break;
    }
    if (a == "--quick") o.quick = true;
    if (a == "--restart-s" && i + 1 < argc) o.restart_s = std::atof(argv[++i]);
  }
  return o;
}

// The three layouts of the run on `n` ranks and this rank's part of each: src (saved and switched
// from), dst (switched to and resumed into), dst2 (a second layout to resume into, with tp merged:
// row-parallel pieces are column blocks at the destination, and pp, dp and ZeRO shards changed).
struct BenchLayouts {
  BenchLayouts(bool quick, int n, int me)
      : model(bench_model(quick)),
        lo(options()),
        src(model, config(n >= 4 ? "tp=2,dp=2" : "tp=" + std::to_string(n)), lo),
        dst(model, config(n >= 4 ? "tp=4" : "tp=1,pp=" + std::to_string(n)), lo),
        dst2(model, config(n >= 4 ? "tp=1,pp=2,dp=2" : "tp=1,pp=1,dp=" + std::to_string(n)), lo),
        sl(src.rank_layout(me)),
        dl(dst.rank_layout(me)),
        dl2(dst2.rank_layout(me)) {}
  dt::vps::ModelSpec model;
  dt::vps::LayoutOptions lo;
  dt::vps::Layout src, dst, dst2;
  dt::vps::RankLayout sl, dl, dl2;

 private:
  static dt::vps::LayoutOptions options() {
    dt::vps::LayoutOptions lo;
    lo.bucket_elems = 4'000'000;
    return lo;
  }
  dt::vps::ParallelConfig config(const std::string& s) const {
    auto c = dt::vps::ParallelConfig::parse(s);
    c.validate_for(model);
    return c;
  }
};

// The online switch src -> dst through the exec engine, cold (fresh destination memory) and warm
// (after switching back), in its own pool; both results verified. Seconds: slowest rank.
struct OnlineResult {
  double cold = 0, warm = 0;
  int failures = 0;
};

OnlineResult online_switch(dt::comm::Transport& world, const BenchLayouts& L) {
  const int me = world.rank();
  const dt::plan::Planner fwd_p(L.src, L.dst), back_p(L.dst, L.src);
  const auto fwd = fwd_p.plan_rank(me), back = back_p.plan_rank(me);
  dt::exec::PoolAllocator pool;
  std::vector<std::byte*> a = dt::testing::allocate_filled(L.src, L.sl, pool), b;
  dt::exec::TransitionOptions opt;
  opt.mem_budget = 256ull << 20;
  OnlineResult r;
  world.barrier();
  r.cold =
      max_over_ranks(world, dt::exec::run_transition(fwd, L.sl, a, L.dl, b, L.lo.elem_bytes, world, pool, opt).seconds);
  r.failures += dt::testing::verify_state(L.dst, L.dl, b) > 0;
  dt::exec::run_transition(back, L.dl, b, L.sl, a, L.lo.elem_bytes, world, pool, opt);
  world.barrier();
  r.warm =
      max_over_ranks(world, dt::exec::run_transition(fwd, L.sl, a, L.dl, b, L.lo.elem_bytes, world, pool, opt).seconds);
  r.failures += dt::testing::verify_state(L.dst, L.dl, b) > 0;
  dt::testing::release_all(L.dst, L.dl, b, pool);
  return r;
}

// The best of the rounds of save and resume, and the best of the disk's limits probed beside them.
struct CkptResults {
  double write_bw = 0, read_bw = 0, fresh_bw = 0, save_s = 1e30;
  double read_ways[4] = {0, 0, 0, 0};  // best of: read cached, direct; into fresh memory cached, direct
  LoadResult same{1e30, 0, 0, 0, 0}, other{1e30, 0, 0, 0, 0}, other2{1e30, 0, 0, 0, 0};
  std::uint64_t files_total = 0;  // bytes of the last round's checkpoint files
  int failures = 0;
};

void keep_best_limits(const DiskLimits& limits, CkptResults& r) {
  r.write_bw = std::max(r.write_bw, limits.write);
  r.read_bw = std::max(r.read_bw, limits.read);
  r.fresh_bw = std::max(r.fresh_bw, limits.read_fresh);
  r.read_ways[0] = std::max(r.read_ways[0], limits.read_cached),
  r.read_ways[1] = std::max(r.read_ways[1], limits.read_direct);
  r.read_ways[2] = std::max(r.read_ways[2], limits.fresh_cached),
  r.read_ways[3] = std::max(r.read_ways[3], limits.fresh_direct);
}

// Saves `state` as step `round`; returns the slowest rank's seconds and sets r.files_total (on
// every rank) to the bytes of that step's files.
double timed_save(dt::comm::Transport& world, const BenchLayouts& L, KindArenas& state, const std::string& dir,
                  int round, CkptResults& r) {
  world.barrier();
  auto t0 = Clock::now();
  dt::ckpt::save(dir, round, L.src, L.lo.kinds, state.view(), {{"bench", true}}, world);
  const double seconds = max_over_ranks(world, seconds_since(t0));
  r.files_total = 0;
  if (world.rank() == 0)
    for (const auto& e : std::filesystem::directory_iterator(dir + "/" + dt::ckpt::step_dir_name(round)))
      r.files_total += std::filesystem::file_size(e.path());
  world.broadcast(&r.files_total, sizeof r.files_total, 0);
  return seconds;
}

// One round: disk probe (the same bytes as this rank's file), save, resume into the saved layout
// (pre-touched memory: I/O only), resume into each new layout in fresh memory (as a restarted
// job would); every resumed element verified.
void ckpt_round(dt::comm::Transport& world, const BenchLayouts& L, KindArenas& state,
                const std::vector<std::pair<std::byte*, std::size_t>>& runs, const std::string& dir, int round,
                CkptResults& r) {
  const int me = world.rank();
  const DiskLimits limits = disk_bandwidth(world, runs, dir);
  keep_best_limits(limits, r);
  const double save1 = timed_save(world, L, state, dir, round, r);
  r.save_s = std::min(r.save_s, save1);

  for (auto& k : state.kind)
    if (k.size) std::memset(k.data.get(), 0, k.size);
  const LoadResult s1 = timed_load(world, dir, L.src, state);
  if (s1.seconds < r.same.seconds) r.same = s1;
  r.failures += verify(L.src, L.sl, state, "resume into the saved layout", me);
  KindArenas fresh = allocate(L.dst, L.dl, false);
  const LoadResult o1 = timed_load(world, dir, L.dst, fresh);
  if (o1.seconds < r.other.seconds) r.other = o1;
  r.failures += verify(L.dst, L.dl, fresh, "resume into the new layout", me);
  fresh = KindArenas{};
  KindArenas fresh2 = allocate(L.dst2, L.dl2, false);
  const LoadResult o2 = timed_load(world, dir, L.dst2, fresh2);
  if (o2.seconds < r.other2.seconds) r.other2 = o2;
  r.failures += verify(L.dst2, L.dl2, fresh2, "resume into the second layout", me);
  if (me == 0 && std::getenv("DT_BENCH_VERBOSE"))
    std::fprintf(stderr,
                 "round %d: write %.2f GB/s, read %.2f GB/s (cached %.2f, direct %.2f; fresh memory %.2f / %.2f), save "
                 "%.3f s, resume same %.3f s, other %.3f s, second %.3f s\n",
                 round, limits.write / 1e9, limits.read / 1e9, limits.read_cached / 1e9, limits.read_direct / 1e9,
                 limits.fresh_cached / 1e9, limits.fresh_direct / 1e9, save1, s1.seconds, o1.seconds, o2.seconds);
}

// Rank 0's report: the run's header, the disk's limits, the save and resume rows, the switch
// table and the verdict.
void print_report(const BenchLayouts& L, int n, std::uint64_t state_total, const CkptResults& r,
                  const OnlineResult& online, double restart_s, bool any_failure) {
  const double gb = 1e9;
  const double files_total = static_cast<double>(r.files_total);
  std::printf("## checkpoint benchmark: %s, %d ranks, %s -> %s, state %.2f GB (%.2f GB in files)\n\n",
              L.model.name.c_str(), n, L.src.config().str().c_str(), L.dst.config().str().c_str(), state_total / gb,
              files_total / gb);
  std::printf(
      "measured in this run (best of 3 probes): fsync'd write %.2f GB/s, cold read %.2f GB/s, cold read into fresh "
      "memory %.2f GB/s (all %d ranks at once; each read the faster of through the page cache / past it: %.2f / %.2f "
      "and %.2f / %.2f GB/s)\n\n",
      r.write_bw / gb, r.read_bw / gb, r.fresh_bw / gb, n, r.read_ways[0] / gb, r.read_ways[1] / gb,
      r.read_ways[2] / gb, r.read_ways[3] / gb);
  std::printf("(each row: best of 3 rounds)\n\n");
  std::printf("| operation | seconds | bytes | GB/s | of the disk's bandwidth |\n|---|---|---|---|---|\n");
  std::printf("| save (files + index + pointer, fsync'd) | %.3f | %.2f GB | %.2f | %.0f %% of write |\n", r.save_s,
              files_total / gb, files_total / r.save_s / gb, 100.0 * files_total / r.save_s / r.write_bw);
  std::printf("| resume, same layout (cold cache) | %.3f | %.2f GB read | %.2f | %.0f %% of read |\n", r.same.seconds,
              r.same.read / gb, r.same.read / r.same.seconds / gb, 100.0 * r.same.read / r.same.seconds / r.read_bw);
  for (const auto* o : {&r.other, &r.other2}) {
    const auto& l = o == &r.other ? L.dst : L.dst2;
    std::printf(
        "| resume into %s (cold cache, fresh memory) | %.3f | %.2f GB read for %.2f GB loaded, %.2f GB of it in place; "
        "%llu reads | %.2f read, %.2f loaded | %.0f %% of read, %.0f %% of read into fresh memory |\n",
        l.config().str().c_str(), o->seconds, o->read / gb, o->loaded / gb, o->in_place / gb,
        static_cast<unsigned long long>(o->calls), o->read / o->seconds / gb, o->loaded / o->seconds / gb,
        100.0 * o->read / o->seconds / r.read_bw, 100.0 * o->read / o->seconds / r.fresh_bw);
  }
  std::printf("\n| switch %s -> %s | seconds |\n|---|---|\n", L.src.config().str().c_str(),
              L.dst.config().str().c_str());
  std::printf("| online (exec engine), cold / warm | %.3f / %.3f |\n", online.cold, online.warm);
  if (restart_s >= 0) {
    const double ckpt_restart = r.save_s + restart_s + r.other.seconds;
    std::printf("| checkpoint-restart: save %.3f + restart %.3f + load %.3f | %.3f |\n", r.save_s, restart_s,
                r.other.seconds, ckpt_restart);
    std::printf("| checkpoint-restart / online, cold / warm | %.1fx / %.1fx |\n", ckpt_restart / online.cold,
                ckpt_restart / online.warm);
  } else {
    std::printf("| checkpoint-restart without restart: save + load | %.3f |\n", r.save_s + r.other.seconds);
  }
  std::printf("\nverify: %s\n", any_failure ? "FAILED" : "ok");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  dt::comm::MpiSession session(&argc, &argv);
  auto world = dt::comm::MpiTransport::world();
  const Options options = parse_options(argc, argv);
  if (options.restart_probe) {
    world->barrier();
    return 0;
  }
  const int n = world->size(), me = world->rank();
  const std::string root = std::getenv("DT_CKPT_DIR") ? std::getenv("DT_CKPT_DIR") : "/tmp";
  const std::string dir = root + "/dt-ckpt-bench";
  if (me == 0) std::filesystem::remove_all(dir), std::filesystem::create_directories(dir);
  world->barrier();
  const BenchLayouts L(options.quick, n, me);

  // 1. The online switch (exec engine), cold and warm, in its own pool.
  const OnlineResult online = online_switch(*world, L);
  // 2. Save and resume, against the fsync'd write and cold read bandwidth of the same bytes.
  KindArenas state = allocate(L.src, L.sl, true);
  fill(L.src, L.sl, state);
  const std::uint64_t state_total = sum_over_ranks(*world, state.bytes());
  const auto runs = segment_runs(L.src, L.sl, state);
  // The disk on this shared machine varies a lot from second to second, so each figure is the
  // best of three rounds and so is each limit.
  CkptResults r;
  for (int round = 1; round <= 3; ++round) ckpt_round(*world, L, state, runs, dir, round, r);
  const int failures = online.failures + r.failures;
  const int any_failure = static_cast<int>(sum_over_ranks(*world, static_cast<std::uint64_t>(failures)));

  if (me == 0) print_report(L, n, state_total, r, online, options.restart_s, any_failure != 0);
  world->barrier();
  if (me == 0) std::filesystem::remove_all(dir);
  world.reset();
  return any_failure ? 1 : 0;
}
