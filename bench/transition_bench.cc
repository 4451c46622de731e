// Transition benchmark: DynaTrain vs a naive in-memory baseline vs the lower bound, in one run.
//
//   mpirun -np 4 bench_transition [--quick]     (bench/run_transition_bench.sh runs 4 and 8)
//
// For each of six switches (TP, PP, DP resize, EP, ZeRO stage, hybrid of three dimensions) on
// models scaled to a few GB of state:
//   lower bound  max over ranks of bytes that must arrive / p2p bandwidth measured in this run
//                (all pairs rank <-> rank^1 exchanging at once, comm::measure_p2p_bandwidth)
//   LB incl. local copies  max over ranks of (bytes in / p2p bandwidth + bytes kept / memcpy
//                bandwidth measured in this run with every rank copying at once)
//   DynaTrain    exec::run_transition, cold (first switch) and warm (after switching back)
//   naive        for every (tensor, kind): all-gather the full tensor to every rank, then slice
//                the destination out of it (allocate every destination first, free sources last)
//   ckpt-restart the checkpoint module (ckpt/, as `train --save / --resume`): ckpt::save of the
//                source state (rank files, index, pointer, every fsync), the files dropped from
//                the page cache, then ckpt::load_rank of each rank's new layout (load). Process
//                restart itself (MPI, libtorch, communicators) is not counted here, so this
//                favours it; bench/run_ckpt_bench.sh adds a measured restart.
// Every result is verified element by element against the content oracle. Rank 0 prints one
// Markdown table row per switch. A last section times a one-to-all fan-out, broadcast vs p2p.
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/mpi/mpi_transport.h"
#include "common/bytes.h"
#include "common/error.h"
#include "comm/probe.h"
#include "exec/box_copy.h"
#include "exec/engine.h"
#include "exec/pool_allocator.h"
#include "testing/state_oracle.h"
#include "plan/planner.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"
#include "common/clock.h"

namespace dt = dynatrain;

namespace {

using dt::Clock;
using dt::seconds_since;

dt::vps::ModelSpec bench_dense(bool quick) {
  dt::vps::ModelSpec m;
  m.name = "bench-dense";
  m.hidden = 1024, m.layers = quick ? 4 : 8, m.heads = 16, m.kv_heads = 8, m.head_dim = 64;
  m.ffn = 2816, m.vocab = 16000;
  return m;
}
dt::vps::ModelSpec bench_moe(bool quick) {
  dt::vps::ModelSpec m;
  m.name = "bench-moe";
  m.hidden = 1024, m.layers = quick ? 2 : 4, m.heads = 16, m.kv_heads = 8, m.head_dim = 64;
  m.ffn = 0, m.vocab = 16000, m.experts = 8, m.top_k = 2, m.expert_ffn = 1024;
  return m;
}

struct Switch {
  const char* what;
  bool moe;
  std::string from, to;
};

std::vector<Switch> switches(int n) {
  if (n >= 8)
    return {{"TP 2->4", false, "tp=2,dp=4", "tp=4,dp=2"},
            {"PP 2->4", false, "pp=2,dp=4", "pp=4,dp=2"},
            {"DP 4->2 (shrink)", false, "tp=2,dp=4", "tp=2,dp=2"},
            {"EP 2->4", true, "dp=8,ep=2", "dp=8,ep=4"},
            {"ZeRO 1->3", false, "tp=2,dp=4,zero=1", "tp=2,dp=4,zero=3"},
            {"hybrid tp,pp,dp", false, "tp=2,dp=4", "tp=4,pp=2,dp=1"}};
  return {{"TP 2->4", false, "tp=2,dp=2", "tp=4"},
          {"PP 2->4", false, "pp=2,dp=2", "pp=4"},
          {"DP 4->2 (shrink)", false, "dp=4", "dp=2"},
          {"EP 2->4", true, "dp=4,ep=2", "dp=4,ep=4"},
          {"ZeRO 1->3", false, "tp=2,dp=2,zero=1", "tp=2,dp=2,zero=3"},
          {"hybrid tp,pp,dp", false, "tp=2,dp=2", "pp=2,dp=1,tp=2"}};
}

std::uint64_t max_u64(dt::comm::Transport& t, std::uint64_t v) {
  const auto all = dt::testing::gather_u64(t, v);
  return *std::max_element(all.begin(), all.end());
}
double max_d(dt::comm::Transport& t, double v) {
  const auto all = dt::testing::gather_double(t, v);
  return *std::max_element(all.begin(), all.end());
}

// Collective: every rank copies `bytes` between two warm buffers at once; the lowest per-rank
// rate in bytes/s over the best of `iters` rounds (the cores are shared, as in a switch).
double measure_copy_bandwidth(dt::comm::Transport& t, std::size_t bytes, int iters) {
  std::vector<std::byte> from(bytes, std::byte{1}), to(bytes, std::byte{0});
  std::memcpy(to.data(), from.data(), bytes);  // touch both
  double best = 1e9;
  for (int i = 0; i < iters; ++i) {
    t.barrier();
    const auto t0 = Clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    best = std::min(best, max_d(t, seconds_since(t0)));
  }
  return static_cast<double>(bytes) / best;
}

// The checkpoint-restart baseline through ckpt/, the module `train --save / --resume` uses;
// returns {save seconds, load seconds} on this rank. ckpt::save writes the source state `a`
// (rank files, index, pointer switch, every fsync); each rank drops its file from the page cache
// (a restarted job reads from disk) and releases `a`; then ckpt::load_rank fills this rank's
// destination `b` in fresh memory, reading only the checksum chunks it needs, each verified.
std::pair<double, double> ckpt_restart_switch(const dt::vps::Layout& src, const dt::vps::Layout& dst,
                                              std::vector<std::byte*>& a, std::vector<std::byte*>& b,
                                              dt::comm::Transport& t, dt::exec::PoolAllocator& pool,
                                              const std::string& dir) {
  const int me = t.rank();
  const auto& eb = src.options().elem_bytes;
  const auto my_src = src.rank_layout(me), my_dst = dst.rank_layout(me);
  const std::string root = dir + "/dt-transition-bench-ckpt";
  if (me == 0) std::filesystem::remove_all(root);
  auto arenas_of = [](std::vector<std::byte*>& buffers) {
    dt::ckpt::Arenas arenas;
    arenas.buffer = [&buffers](const dt::vps::LocalBuffer& lb) { return buffers.at(lb.id); };
    return arenas;
  };
  t.barrier();
  auto t0 = Clock::now();
  dt::ckpt::save(root, 1, src, src.options().kinds, arenas_of(a), {{"bench", true}}, t);
  if (me < src.config().world_size()) {  // a restarted job reads from disk, not from the cache
    const std::string path = root + "/" + dt::ckpt::step_dir_name(1) + "/" + dt::ckpt::rank_file_name(me);
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), ::close(fd);
  }
  dt::testing::release_all(src, my_src, a, pool);
  t.barrier();
  const double save_s = seconds_since(t0);
  t0 = Clock::now();
  b.assign(my_dst.buffers.size(), nullptr);
  for (std::size_t j = 0; j < my_dst.buffers.size(); ++j) {
    const std::size_t bytes =
        static_cast<std::size_t>(my_dst.buffers[j].numel) * eb[static_cast<int>(my_dst.buffers[j].kind)];
    if (bytes) {
      b[j] = pool.allocate(bytes);
      std::memset(b[j], 0, bytes);
    }
  }
  const dt::ckpt::Checkpoint c = dt::ckpt::open_latest(root, dst.model());
  dt::ckpt::load_rank(c, dst, me, arenas_of(b));
  t.barrier();
  const double load_s = seconds_since(t0);
  if (me == 0) std::filesystem::remove_all(root);
  return {save_s, load_s};
}

// The naive baseline. Returns seconds on this rank; `peak` gets its accounted peak.
double naive_switch(const dt::vps::Layout& src, const dt::vps::Layout& dst, std::vector<std::byte*>& a,
                    std::vector<std::byte*>& b, dt::comm::Transport& t, dt::exec::PoolAllocator& pool,
                    std::uint64_t& peak) {
  const int W = t.size(), me = t.rank();
  const auto& eb = src.options().elem_bytes;
  const auto my_src = src.rank_layout(me), my_dst = dst.rank_layout(me);
  // (tensor, kind) -> per rank: the segments it holds in the source layout.
  struct Held {
    int rank;
    const dt::vps::Segment* seg;
    std::uint32_t buffer;
  };
  std::vector<dt::vps::RankLayout> all_src;
  for (int r = 0; r < W; ++r) all_src.push_back(src.rank_layout(r));
  std::map<std::pair<std::uint32_t, int>, std::vector<Held>> held;
  for (int r = 0; r < W; ++r)
    for (const auto& buf : all_src[r].buffers)
      for (const auto& s : buf.segments) held[{s.tensor, static_cast<int>(buf.kind)}].push_back({r, &s, buf.id});
  std::map<std::pair<std::uint32_t, int>, std::vector<std::pair<std::uint32_t, const dt::vps::Segment*>>> wanted;
  for (const auto& buf : my_dst.buffers)
    for (const auto& s : buf.segments) wanted[{s.tensor, static_cast<int>(buf.kind)}].push_back({buf.id, &s});

  t.barrier();
  const auto t0 = Clock::now();
  std::uint64_t live = my_src.bytes(src.options());
  b.assign(my_dst.buffers.size(), nullptr);
  for (std::size_t j = 0; j < my_dst.buffers.size(); ++j) {
    const std::size_t bytes =
        static_cast<std::size_t>(my_dst.buffers[j].numel) * eb[static_cast<int>(my_dst.buffers[j].kind)];
    if (bytes) b[j] = pool.allocate(bytes), live += bytes;
  }
  peak = live;
  std::vector<std::byte> blob, gathered, full;
  for (const auto& [key, holders] : held) {
    const auto& ts = src.tensors()[key.first];
    const std::size_t e = static_cast<std::size_t>(eb[key.second]);
    std::vector<std::size_t> count(static_cast<std::size_t>(W), 0);
    for (const auto& h : holders) count[h.rank] += static_cast<std::size_t>(h.seg->box.numel()) * e;
    const std::size_t block = (*std::max_element(count.begin(), count.end()) + 3) / 4 * 4;
    blob.resize(block);
    gathered.resize(block * W);
    std::size_t at = 0;
    for (const auto& h : holders)
      if (h.rank == me) {
        const std::size_t n = static_cast<std::size_t>(h.seg->box.numel()) * e;
        std::memcpy(blob.data() + at, a[h.buffer] + h.seg->offset * e, n);
        at += n;
      }
    t.all_gather(reinterpret_cast<const float*>(blob.data()), reinterpret_cast<float*>(gathered.data()), block / 4);
    full.resize(static_cast<std::size_t>(ts.numel()) * e);
    const dt::vps::Box fb = ts.full_box();
    std::vector<std::size_t> pos(static_cast<std::size_t>(W), 0);
    for (const auto& h : holders) {
      const std::byte* in = gathered.data() + block * h.rank + pos[h.rank];
      dt::exec::copy_box(h.seg->box, in, h.seg->box, full.data(), fb, e);
      pos[h.rank] += static_cast<std::size_t>(h.seg->box.numel()) * e;
    }
    if (auto w = wanted.find(key); w != wanted.end())
      for (const auto& [buf, s] : w->second)
        dt::exec::copy_box(s->box, full.data(), fb, b[buf] + s->offset * e, s->box, e);
    peak = std::max<std::uint64_t>(peak, live + blob.size() + gathered.size() + full.size());
  }
  dt::testing::release_all(src, my_src, a, pool);
  return seconds_since(t0);
}

// What every switch of the run shares: the options, the budget, the layout options and the
// bandwidths measured at the start of the run.
struct Bench {
  explicit Bench(dt::comm::Transport& w) : world(w) {}
  dt::comm::Transport& world;
  bool quick = false;
  std::string ckpt_dir;  // checkpoint files go here (DT_CKPT_DIR, default /tmp)
  int n = 0, me = 0;
  std::size_t budget = 256ull << 20;
  dt::vps::LayoutOptions lo;
  double bw = 0, copy_bw = 0;  // p2p and memcpy bytes/s per rank, all at once
};

// Reads the command line (`--quick`) and measures the p2p and memcpy bandwidths (collective).
Bench set_up(dt::comm::Transport& world, int argc, char** argv) {
  Bench b(world);
  b.quick = argc > 1 && std::string(argv[1]) == "--quick";
  b.ckpt_dir = std::getenv("DT_CKPT_DIR") ? std::getenv("DT_CKPT_DIR") : "/tmp";
  b.n = world.size(), b.me = world.rank();
  b.lo.bucket_elems = 4'000'000;                // Megatron uses 40M; scaled with the model
  b.lo.align_elems = dt::vps::kPageAlignElems;  // kept tensors at new offsets remapped (exec/README.md)
  b.bw = dt::comm::measure_p2p_bandwidth(world, std::size_t{64} << 20, 5);
  b.copy_bw = measure_copy_bandwidth(world, std::size_t{64} << 20, 5);
  return b;
}

void print_header(const Bench& b) {
  std::printf(
      "## %d ranks (mpi, %s), budget %s, p2p bandwidth %.2f GB/s per rank (all pairs at once), "
      "memcpy %.2f GB/s per rank (all ranks at once)\n\n",
      b.n, b.quick ? "quick" : "full", dt::format_bytes(static_cast<double>(b.budget)).c_str(), b.bw / 1e9,
      b.copy_bw / 1e9);
  std::printf(
      "| switch | model | from -> to | state (all ranks) | max in per rank | lower bound s | LB incl. local copies s | "
      "DynaTrain cold s | warm s | warm / LB | warm / LB incl. copies | naive s | naive / warm | ckpt save + load s | "
      "ckpt / warm | peak / bound (GiB) | naive peak GiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
}

// Collective: 1 where some rank's `bufs` differ from the content oracle (the first difference
// printed by the rank that found it), else 0.
int verify_on_all_ranks(dt::comm::Transport& world, const char* what, const dt::vps::Layout& l,
                        const dt::vps::RankLayout& rl, std::vector<std::byte*>& bufs) {
  std::string first;
  const int bad = dt::testing::verify_state(l, rl, bufs, &first);
  if (bad) std::fprintf(stderr, "[rank %d] %s: %s\n", world.rank(), what, first.c_str());
  return static_cast<int>(max_u64(world, static_cast<std::uint64_t>(bad)) > 0);
}

// DT_BENCH_VERBOSE: where this rank's time of the cold and the warm switch went.
void print_phases(int me, const char* what, const dt::exec::TransitionStats& cold,
                  const dt::exec::TransitionStats& warm) {
  for (const auto* s : {&cold, &warm})
    std::fprintf(stderr,
                 "[rank %d] %s %s: %.3fs agree %.3f keep %.3f pack %.3f wait %.3f unpack %.3f alloc %.3f; "
                 "%llu msgs (%llu zero-copy out, %llu in), %llu waves, staging %llu\n",
                 me, what, s == &cold ? "cold" : "warm", s->seconds, s->agree_seconds, s->keep_seconds, s->pack_seconds,
                 s->wait_seconds, s->unpack_seconds, s->alloc_seconds, (unsigned long long)s->messages,
                 (unsigned long long)s->zero_copy_sends, (unsigned long long)s->zero_copy_recvs,
                 (unsigned long long)s->waves, (unsigned long long)s->staging_bytes);
}

// One switch's measurements on this rank: the engine cold and warm, the naive baseline (seconds
// and peak over all ranks), the checkpoint-restart baseline (save and load, over all ranks).
struct Measured {
  dt::exec::TransitionStats cold, warm;
  double naive_s = 0, save_s = 0, load_s = 0;
  std::uint64_t naive_peak = 0;  // this rank's
  int failures = 0;              // results that differ from the oracle (on some rank)
};

// Runs the engine's switch src -> dst cold and warm, then (back to the source each time) the
// naive and the checkpoint-restart baselines, every result verified; `need` ranks take part.
Measured measure_switch(const Bench& bench, const Switch& sw, const dt::vps::Layout& src, const dt::vps::Layout& dst,
                        int need) {
  auto& world = bench.world;
  const int me = bench.me;
  const auto& eb = bench.lo.elem_bytes;
  const dt::plan::Planner fwd_p(src, dst), back_p(dst, src);
  const auto fwd = me < need ? fwd_p.plan_rank(me) : dt::plan::RankPlan{me, {}, {}, {}};
  const auto back = me < need ? back_p.plan_rank(me) : dt::plan::RankPlan{me, {}, {}, {}};
  const auto sl = src.rank_layout(me), dl = dst.rank_layout(me);
  dt::exec::PoolAllocator pool;
  std::vector<std::byte*> a = dt::testing::allocate_filled(src, sl, pool), b;
  dt::exec::TransitionOptions opt;
  opt.mem_budget = bench.budget;
  Measured m;
  world.barrier();
  m.cold = dt::exec::run_transition(fwd, sl, a, dl, b, eb, world, pool, opt);
  m.failures += verify_on_all_ranks(world, sw.what, dst, dl, b);
  world.barrier();
  dt::exec::run_transition(back, dl, b, sl, a, eb, world, pool, opt);
  world.barrier();
  m.warm = dt::exec::run_transition(fwd, sl, a, dl, b, eb, world, pool, opt);
  m.failures += verify_on_all_ranks(world, sw.what, dst, dl, b);
  if (std::getenv("DT_BENCH_VERBOSE")) print_phases(me, sw.what, m.cold, m.warm);
  // Back to the source for the naive baseline (its destination then reuses warm pool memory).
  world.barrier();
  dt::exec::run_transition(back, dl, b, sl, a, eb, world, pool, opt);
  m.naive_s = max_d(world, naive_switch(src, dst, a, b, world, pool, m.naive_peak));
  m.failures += verify_on_all_ranks(world, sw.what, dst, dl, b);
  // Back once more for the checkpoint-restart baseline.
  world.barrier();
  dt::exec::run_transition(back, dl, b, sl, a, eb, world, pool, opt);
  const auto [save_local, load_local] = ckpt_restart_switch(src, dst, a, b, world, pool, bench.ckpt_dir);
  m.save_s = max_d(world, save_local), m.load_s = max_d(world, load_local);
  m.failures += verify_on_all_ranks(world, sw.what, dst, dl, b);
  dt::testing::release_all(dst, dl, b, pool);
  return m;
}

// Collective: gathers one switch's figures; rank 0 prints its table row.
void report_switch(const Bench& bench, const Switch& sw, const dt::vps::ModelSpec& model, const dt::vps::Layout& src,
                   const dt::vps::Layout& dst, const Measured& m) {
  auto& world = bench.world;
  const auto& cold = m.cold;
  const double cold_s = max_d(world, cold.seconds), warm_s = max_d(world, m.warm.seconds);
  const std::uint64_t max_in = max_u64(world, cold.bytes_received);
  const auto state = dt::testing::gather_u64(world, cold.src_bytes);
  std::uint64_t total_state = 0;
  for (auto v : state) total_state += v;
  const auto peaks = dt::testing::gather_u64(world, std::max(cold.peak_bytes, m.warm.peak_bytes));
  const auto bounds = dt::testing::gather_u64(world, std::max(cold.src_bytes, cold.dst_bytes) + bench.budget);
  const std::uint64_t npeak = max_u64(world, m.naive_peak);
  std::size_t worst = 0;  // the rank closest to (or furthest over) its bound
  for (std::size_t r = 0; r < peaks.size(); ++r)
    if (static_cast<double>(peaks[r]) / bounds[r] > static_cast<double>(peaks[worst]) / bounds[worst]) worst = r;
  const double bw = bench.bw;
  const double lb = bw > 0 ? static_cast<double>(max_in) / bw : 0;
  // A second floor that also charges each rank its kept bytes at the measured memcpy rate.
  const double lb_copy = max_d(
      world, static_cast<double>(cold.bytes_received) / bw + static_cast<double>(cold.bytes_kept) / bench.copy_bw);
  if (bench.me != 0) return;
  const double gib = 1024.0 * 1024 * 1024;
  const double naive_s = m.naive_s, save_s = m.save_s, load_s = m.load_s;
  std::printf(
      "| %s | %s | %s -> %s | %.2f GB | %.2f GB | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.3f | %.1fx | %.2f + %.2f "
      "| %.0fx | %.2f / %.2f%s | %.2f |\n",
      sw.what, model.name.c_str(), src.config().str().c_str(), dst.config().str().c_str(), total_state / 1e9,
      max_in / 1e9, lb, lb_copy, cold_s, warm_s, lb > 0 ? warm_s / lb : 0.0, lb_copy > 0 ? warm_s / lb_copy : 0.0,
      naive_s, warm_s > 0 ? naive_s / warm_s : 0.0, save_s, load_s, warm_s > 0 ? (save_s + load_s) / warm_s : 0.0,
      peaks[worst] / gib, bounds[worst] / gib, peaks[worst] <= bounds[worst] ? "" : " (OVER)", npeak / gib);
  std::fflush(stdout);
}

// Every switch of switches(n) that fits on the run's ranks: measured, verified, one row each.
// Returns the number of switches with a wrong result.
int run_switches(const Bench& bench) {
  int failures = 0;
  for (const auto& sw : switches(bench.n)) {
    const dt::vps::ModelSpec model = sw.moe ? bench_moe(bench.quick) : bench_dense(bench.quick);
    const dt::vps::Layout src(model, dt::vps::ParallelConfig::parse(sw.from), bench.lo);
    const dt::vps::Layout dst(model, dt::vps::ParallelConfig::parse(sw.to), bench.lo);
    const int need = std::max(src.config().world_size(), dst.config().world_size());
    if (need > bench.n) continue;
    const Measured m = measure_switch(bench, sw, src, dst, need);
    failures += m.failures;
    report_switch(bench, sw, model, src, dst, m);
  }
  return failures;
}

// Fan-out: one rank's 64 MiB to every other rank, broadcast vs point-to-point (best of 4).
void fan_out(dt::comm::Transport& world) {
  const int n = world.size(), me = world.rank();
  const std::size_t bytes = std::size_t{64} << 20;
  std::vector<std::byte> buf(bytes, std::byte{3});
  double best_b = 1e9, best_p = 1e9;
  for (int it = 0; it < 4; ++it) {
    world.barrier();
    auto t0 = Clock::now();
    world.broadcast(buf.data(), bytes, 0);
    best_b = std::min(best_b, max_d(world, seconds_since(t0)));
    world.barrier();
    t0 = Clock::now();
    if (me == 0) {
      std::vector<std::unique_ptr<dt::comm::Request>> reqs;
      for (int r = 1; r < n; ++r) reqs.push_back(world.isend(buf.data(), bytes, r, 9));
      dt::comm::wait_all(reqs);
    } else {
      world.irecv(buf.data(), bytes, 0, 9)->wait();
    }
    best_p = std::min(best_p, max_d(world, seconds_since(t0)));
  }
  if (me == 0)
    std::printf("\nfan-out of 64 MiB from rank 0 to %d ranks: broadcast %.3f s, point-to-point %.3f s (best of 4)\n\n",
                n - 1, best_b, best_p);
}

}  // namespace

int main(int argc, char** argv) {
  dt::comm::MpiSession session(&argc, &argv);
  auto world = dt::comm::MpiTransport::world();
  const Bench bench = set_up(*world, argc, argv);
  if (bench.me == 0) print_header(bench);
  const int failures = run_switches(bench);
  fan_out(*world);
  world.reset();
  return failures ? 1 : 0;
}
