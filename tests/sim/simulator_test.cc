// The switch-time simulator on hand-checkable schedules, and on the engine's own traces.
#include <gtest/gtest.h>

#include <map>

#include "comm/inproc/inproc_transport.h"
#include "common/error.h"
#include "exec/pool_allocator.h"
#include "exec/wave_agreement.h"
#include "plan/planner.h"
#include "sim/link_bound.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "testing/fill.h"
#include "vps/model_spec.h"

namespace dynatrain::sim {
namespace {

using exec::ScheduleTrace;

// Round numbers: rates in GB/s (1e9 bytes/s), no latency unless a test sets one.
Cluster toy(int gpus_per_node, int nics_per_node) {
  Cluster c;
  c.name = "toy";
  c.nodes = 2;
  c.gpus_per_node = gpus_per_node;
  c.gpu_link = 5e9;
  c.nics_per_node = nics_per_node;
  c.nic = 10e9;
  c.pcie = 100e9;
  c.copy = 10e9;
  return c;
}
std::vector<ScheduleTrace> traces(int n) {
  std::vector<ScheduleTrace> t(n);
  for (int p = 0; p < n; ++p) t[p].rank = p, t[p].world = n;
  return t;
}
constexpr std::uint64_t kGB = 1'000'000'000;

TEST(Simulator, SingleMessageTakesLatencyPlusBytesOverTheLink) {
  Cluster c = toy(2, 1);
  c.intra_latency = 5e-6;
  auto t = traces(2);
  t[0].post(0, 1, 0, kGB, false, 0);
  t[0].wait(0, 1, 0, 0);
  t[1].post(0, 0, 0, 0, false, kGB);
  t[1].wait(0, 0, 0, 0);
  const SimResult r = simulate(t, c);
  EXPECT_NEAR(r.seconds, 5e-6 + 0.2, 1e-9);  // 1 GB at 5 GB/s
  EXPECT_EQ(r.messages, 1u);
  EXPECT_EQ(r.busiest_link, "node 0 GPU 0 link out");  // out and in tie; the first port wins
  EXPECT_NEAR(r.utilisation(), 0.2 / (0.2 + 5e-6), 1e-9);
  EXPECT_EQ(r.critical_link, "node 0 GPU 0 link out");  // on a tie, the first port of the message
}

TEST(Simulator, TwoMessagesSharingANicEachGetHalf) {
  // Node 0: GPUs 0, 1 behind one NIC of 10 GB/s; each sends 1 GB to its twin on node 1.
  auto t = traces(4);
  for (int p : {0, 1}) {
    t[p].post(0, p + 2, 0, kGB, false, 0);
    t[p].wait(0, p + 2, 0, 0);
    t[p + 2].post(0, p, 0, 0, false, kGB);
    t[p + 2].wait(0, p, 0, 0);
  }
  EXPECT_NEAR(simulate(t, toy(2, 1)).seconds, 0.2, 1e-9);  // 5 GB/s each
  const SimResult own = simulate(t, toy(2, 2));            // a NIC each: 10 GB/s each
  EXPECT_NEAR(own.seconds, 0.1, 1e-9);
  EXPECT_EQ(own.busiest_link, "node 0 NIC 0 out");
}

TEST(Simulator, PipelineOfRoundsOverlapsPackWithTheWire) {
  // Process 0 sends three packed 1 GB rounds to process 1 in the engine's order (two in
  // flight): post 0, post 1, wait 0, post 2, wait 1, wait 2. Pack 0.1 s each, the wire 0.2 s.
  // 0.1: round 0 starts; 0.2: round 1 starts, both at half rate; 0.4: round 0 done, pack 2;
  // 0.5: round 1 done, round 2 starts alone; 0.7: done. Serial would be 3 x 0.3 = 0.9 s.
  auto t = traces(2);
  t[0].post(0, 1, 0, kGB, true, 0);
  t[0].post(0, 1, 1, kGB, true, 0);
  t[0].wait(0, 1, 0, 0);
  t[0].post(0, 1, 2, kGB, true, 0);
  t[0].wait(0, 1, 1, 0);
  t[0].wait(0, 1, 2, 0);
  t[1].post(0, 0, 0, 0, false, kGB);
  t[1].post(0, 0, 1, 0, false, kGB);
  t[1].wait(0, 0, 0, 0);
  t[1].post(0, 0, 2, 0, false, kGB);
  t[1].wait(0, 0, 1, 0);
  t[1].wait(0, 0, 2, 0);
  const SimResult r = simulate(t, toy(2, 1));
  EXPECT_NEAR(r.seconds, 0.7, 1e-9);
  EXPECT_EQ(r.messages, 3u);
  EXPECT_NEAR(r.busiest_link_seconds, 0.6, 1e-9);
}

TEST(Simulator, KeepOverlapsATransferUnpackDoesNot) {
  // Process 0: post a 1 GB send (0.2 s on the wire), keep 1 GB (0.1 s), wait. Process 1
  // receives into staging and unpacks 1 GB (0.1 s) after the message is in.
  auto t = traces(2);
  t[0].post(0, 1, 0, kGB, false, 0);
  t[0].keep(kGB);
  t[0].wait(0, 1, 0, 0);
  t[1].post(0, 0, 0, 0, false, kGB);
  t[1].wait(0, 0, 0, kGB);
  const SimResult r = simulate(t, toy(2, 1));
  EXPECT_NEAR(r.seconds, 0.3, 1e-9);
  EXPECT_EQ(r.last_process, 1);
  EXPECT_NEAR(r.last_copy_seconds, 0.1, 1e-9);
  EXPECT_NEAR(r.last_wait_seconds, 0.2, 1e-9);
}

TEST(Simulator, FreshMemoryCostsOnlyWhenGiven) {
  auto t = traces(1);
  t[0].fresh(kGB);
  EXPECT_EQ(simulate(t, toy(2, 1)).seconds, 0);
  EXPECT_NEAR(simulate(t, toy(2, 1), {.fresh_rate = 1e9}).seconds, 1.0, 1e-9);
}

TEST(Simulator, ProcessesSharingCoresRunAtTheirShare) {
  // cpu_cores 1, 2 processes on the node: the copy rate 10 GB/s was measured with both busy,
  // so a full core copies 20 GB/s. One copying alone: 0.05 s; both at once: 0.1 s each.
  auto t = traces(2);
  t[0].keep(kGB);
  EXPECT_NEAR(simulate(t, toy(2, 1), {.cpu_cores = 1}).seconds, 0.05, 1e-9);
  t[1].keep(kGB);
  EXPECT_NEAR(simulate(t, toy(2, 1), {.cpu_cores = 1}).seconds, 0.1, 1e-9);
  EXPECT_NEAR(simulate(t, toy(2, 1), {.cpu_cores = 2}).seconds, 0.1, 1e-9);  // a core each: as measured
  // A message (1 GB, link 5 GB/s as measured with both busy: 10 GB/s on a full core) while
  // the receiver also copies 1 GB. With shared cores the receiver (its copier: it reads the
  // sender's memory) moves bytes only inside the transport, so the message waits for the copy.
  // One core; the sender moves nothing, so only the receiver is busy and has the whole core:
  // the copy at 20 GB/s (0.05 s), then the message at 10 GB/s (0.1 s).
  auto u = traces(2);
  u[0].post(0, 1, 0, kGB, false, 0);
  u[0].wait(0, 1, 0, 0);
  u[1].post(0, 0, 0, 0, false, kGB);
  u[1].keep(kGB);
  u[1].wait(0, 0, 0, 0);
  EXPECT_NEAR(simulate(u, toy(2, 1), {.cpu_cores = 1}).seconds, 0.15, 1e-9);
  EXPECT_NEAR(simulate(u, toy(2, 1)).seconds, 0.2, 1e-9);  // without: the wire's 0.2 s, the copy hidden
  // The sender copying instead does not hold the message (the receiver reads it meanwhile): both
  // busy, half a core each: the copy at 10 GB/s (0.1 s) beside the message at 5 GB/s; then the
  // message alone at 10 GB/s: 0.5 GB in 0.1 s, then 0.5 GB in 0.05 s: 0.15 s.
  auto w = traces(2);
  w[0].post(0, 1, 0, kGB, false, 0);
  w[0].keep(kGB);
  w[0].wait(0, 1, 0, 0);
  w[1].post(0, 0, 0, 0, false, kGB);
  w[1].wait(0, 0, 0, 0);
  EXPECT_NEAR(simulate(w, toy(2, 1), {.cpu_cores = 1}).seconds, 0.15, 1e-9);
  // The same message alone (no copy): the receiver's whole core moves 10 GB/s, the link port
  // 10 GB/s: 0.1 s.
  auto v = traces(2);
  v[0].post(0, 1, 0, kGB, false, 0);
  v[0].wait(0, 1, 0, 0);
  v[1].post(0, 0, 0, 0, false, kGB);
  v[1].wait(0, 0, 0, 0);
  EXPECT_NEAR(simulate(v, toy(2, 1), {.cpu_cores = 1}).seconds, 0.1, 1e-9);
}

TEST(Simulator, ScatteredRunsCostPerRunOnTheSideThatCopies) {
  // 1 GB at 5 GB/s (0.2 s) in 1001 runs on the receiver's side, 1 on the sender's: 1000 runs
  // beyond the first at 100 us each add 0.1 s; without run_seconds they cost nothing.
  auto t = traces(2);
  t[0].post(0, 1, 0, kGB, false, 0, 1, 1);
  t[0].wait(0, 1, 0, 0);
  t[1].post(0, 0, 0, 0, false, kGB, 1, 1001);
  t[1].wait(0, 0, 0, 0);
  EXPECT_NEAR(simulate(t, toy(2, 1), {.run_seconds = 1e-4}).seconds, 0.3, 1e-9);
  EXPECT_NEAR(simulate(t, toy(2, 1)).seconds, 0.2, 1e-9);
  // Who copies decides what a copy on the other side holds up (cpu_cores 2: a core each, the
  // rates as given). The receiver reads (its runs are the more scattered): its 1 GB keep
  // (0.1 s) stalls the message, then 0.2 s of bytes and 0.1 s of runs: 0.4 s.
  t[1].events.insert(t[1].events.begin() + 1,
                     exec::ScheduleEvent{exec::ScheduleEvent::Kind::kKeep, 0, -1, 0, 0, 0, 0, 0, kGB});
  EXPECT_NEAR(simulate(t, toy(2, 1), {.cpu_cores = 2, .run_seconds = 1e-4}).seconds, 0.4, 1e-9);
  // The sender's runs scattered (1001 > 2 x 1, and at least 64): the sender writes, so the
  // receiver's keep runs beside the message: 0.3 s.
  t[0].events[0].send_runs = 1001;
  t[1].events[0].recv_runs = 1;
  EXPECT_NEAR(simulate(t, toy(2, 1), {.cpu_cores = 2, .run_seconds = 1e-4}).seconds, 0.3, 1e-9);
}

TEST(Simulator, UnpairedOrMismatchedMessagesAreInvariantErrors) {
  auto t = traces(2);
  t[0].post(0, 1, 0, kGB, false, 0);
  t[0].wait(0, 1, 0, 0);
  EXPECT_THROW(simulate(t, toy(2, 1)), InvariantError);  // nobody receives it
  t[1].post(0, 0, 0, 0, false, kGB / 2);
  EXPECT_THROW(simulate(t, toy(2, 1)), InvariantError);  // sizes differ
}

// The engine's own schedule: every process's trace pairs up, moves the plan's bytes, and the
// prediction is at least the link-aware lower bound of the same plan on the same cluster.
// A switch's plan and every process's trace from the engine's dry run (sim/trace.h).
struct EngineSwitch {
  EngineSwitch(const char* model, const char* from, const char* to, const Cluster& c, int processes,
               std::uint64_t mem_budget)
      : src(vps::model_from_name(model), vps::ParallelConfig::parse(from), lo),
        dst(vps::model_from_name(model), vps::ParallelConfig::parse(to), lo),
        planner(src, dst, c.topology(processes)) {
    exec::TransitionOptions opt;
    opt.mem_budget = mem_budget;
    opt.topology = c.topology(processes);
    traces = trace_switch(planner, lo.elem_bytes, opt);
  }
  vps::LayoutOptions lo;
  vps::Layout src, dst;
  plan::Planner planner;
  std::vector<ScheduleTrace> traces;
};

TEST(Simulator, EngineTracesOfARealSwitchPairUpAndRespectTheBound) {
  Cluster c = toy(2, 1);
  c.gpu_link = 1e6, c.nic = 1e5, c.pcie = 1e6, c.copy = 1e7;  // tiny model, slow links: bytes dominate
  const EngineSwitch sw("tiny-moe", "dp=4,ep=2", "tp=2,dp=2,ep=4", c, 4, 4096);  // budget: several waves and chunks
  const auto& tr = sw.traces;
  const auto& planner = sw.planner;
  const auto& lo = sw.lo;
  ASSERT_EQ(tr.size(), 4u);
  const SimResult r = simulate(tr, c);
  std::uint64_t planned = 0;
  for (const auto& p : planner.plan_all())
    for (const auto& [peer, pieces] : p.send)
      for (const auto& piece : pieces) planned += piece.box.numel() * lo.elem_bytes[static_cast<int>(piece.kind)];
  EXPECT_EQ(r.bytes, planned);
  EXPECT_GT(r.messages, 8u);
  const LinkBound bound = link_lower_bound(planner.plan_all(), lo.elem_bytes, c);
  EXPECT_GE(r.seconds, bound.busiest_link_seconds * (1 - 1e-9));
  EXPECT_LT(r.seconds, 10 * bound.seconds);
}

// The plain exchange of a real switch (sim/trace.h) carries exactly its traffic: per ordered pair
// the same bytes, in messages of at most the chunk, nothing packed, kept or allocated; it pairs
// up in the simulator and is no slower than the switch on the same cluster.
TEST(Simulator, PlainExchangeCarriesTheSwitchsTrafficAndNothingElse) {
  Cluster c = toy(2, 1);
  c.gpu_link = 1e6, c.nic = 1e5, c.pcie = 1e6, c.copy = 1e7;
  const EngineSwitch sw("tiny-moe", "dp=4,ep=2", "tp=2,dp=2,ep=4", c, 4, 4096);
  constexpr std::uint64_t kChunk = 1000;
  const auto plain = plain_exchange_traces(sw.traces, kChunk);
  ASSERT_EQ(plain.size(), 4u);
  auto traffic = [](const std::vector<ScheduleTrace>& tr) {
    std::map<std::pair<int, int>, std::uint64_t> sent;
    for (const auto& t : tr)
      for (const auto& e : t.events)
        if (e.kind == exec::ScheduleEvent::Kind::kPost) sent[{t.rank, e.peer}] += e.send_bytes;
    std::erase_if(sent, [](const auto& kv) { return kv.second == 0; });
    return sent;
  };
  EXPECT_EQ(traffic(plain), traffic(sw.traces));
  for (const auto& t : plain)
    for (const auto& e : t.events) {
      EXPECT_NE(e.kind, exec::ScheduleEvent::Kind::kKeep);
      EXPECT_NE(e.kind, exec::ScheduleEvent::Kind::kFresh);
      EXPECT_LE(e.send_bytes, kChunk);
      EXPECT_LE(e.recv_bytes, kChunk);
      EXPECT_EQ(e.pack_bytes + e.unpack_bytes, 0u);
    }
  EXPECT_LE(simulate(plain, c).seconds, simulate(sw.traces, c).seconds);
}

// By hand: processes 0 and 1 swap 1 GB each in chunks of 250 MB (4 rounds, one posted ahead).
// At 5 GB/s per port and no latency the exchange takes 0.2 s; measured in 0.4 s, the
// calibrated link is 2.5 GB/s on every port, and the copy rate does not change.
TEST(Simulator, CalibratedLinksPlayTheMeasuredExchangeInTheMeasuredTime) {
  const Cluster c = toy(2, 1);
  auto sw = traces(2);
  sw[0].post(0, 1, 0, kGB, false, kGB);
  sw[0].wait(0, 1, 0, 0);
  sw[1].post(0, 0, 0, kGB, false, kGB);
  sw[1].wait(0, 0, 0, 0);
  const auto plain = plain_exchange_traces(sw, kGB / 4);
  ASSERT_EQ(plain[0].events.size(), 8u);  // 4 posts, 4 waits
  EXPECT_NEAR(simulate(plain, c).seconds, 0.2, 1e-9);
  const Cluster fit = calibrate_links(plain, 0.4, c);
  EXPECT_NEAR(fit.gpu_link, 2.5e9, 1e3);
  EXPECT_NEAR(fit.nic / c.nic, 0.5, 1e-6);
  EXPECT_NEAR(fit.pcie / c.pcie, 0.5, 1e-6);
  EXPECT_EQ(fit.copy, c.copy);
  EXPECT_NEAR(simulate(plain, fit).seconds, 0.4, 1e-6);
  EXPECT_THROW(calibrate_links(plain, 0, c), InvariantError);
}

// Fan-out's stages traced and spliced (sim::trace_fanout): dp=1 -> dp=4 without ZeRO on 4 nodes
// of one process, every box replicated, so one source feeds 3 nodes. On a slow NIC the one-stage
// switch sends 3 copies out of the source's NIC; the tree's 2 stages send 2 (stage 1 to one node,
// stage 2 to another while that node passes its copy on): 2/3 of the time. Every stage's
// messages pair up, and the simulator moves exactly the stages' bytes.
TEST(Simulator, FanoutStagesSpliceAndATreeRelievesTheSource) {
  Cluster c = toy(1, 1);
  c.nodes = 4;
  c.gpu_link = 1e9, c.nic = 1e6, c.pcie = 1e9, c.copy = 1e10;  // the NIC is the limit
  const vps::LayoutOptions lo;
  const vps::Layout src(vps::model_from_name("tiny-dense"), vps::ParallelConfig::parse("dp=1,zero=0"), lo);
  const vps::Layout dst(vps::model_from_name("tiny-dense"), vps::ParallelConfig::parse("dp=4,zero=0"), lo);
  const plan::Planner planner(src, dst, c.topology(4));
  const plan::FanoutPlan fp = plan::plan_fanout(planner, planner.plan_all(), lo.elem_bytes, plan::FanoutMode::kOn);
  ASSERT_TRUE(fp.applied);
  ASSERT_EQ(fp.stages.size(), 2u);
  exec::TransitionOptions opt;
  opt.mem_budget = std::uint64_t{1} << 30;
  opt.topology = c.topology(4);
  const SimResult one = simulate(trace_switch(planner, lo.elem_bytes, opt), c);
  const SimResult staged = simulate(trace_fanout(planner, fp, lo.elem_bytes, opt), c);
  std::uint64_t stage_bytes = 0;
  for (const auto& stage : fp.stages)
    for (const auto& p : stage)
      for (const auto& [peer, pieces] : p.send)
        for (const auto& piece : pieces) stage_bytes += piece.box.numel() * lo.elem_bytes[static_cast<int>(piece.kind)];
  EXPECT_EQ(staged.bytes, stage_bytes);
  EXPECT_EQ(one.bytes, stage_bytes);  // a tree moves the same bytes, from other senders
  EXPECT_NEAR(staged.seconds / one.seconds, 2.0 / 3.0, 0.02);
}

// tp=2 -> dp=2 on gpt3-1.3b (rows of 2 KiB per tp shard): the receiver puts each row of the
// peer's shard beside its own, so messages move straight into scattered runs (the tracer's
// in-process transport moves runs between every pair, as MPI does inside a node); the trace
// says how many runs each side has, and run_seconds makes them cost.
TEST(Simulator, EngineTracesCountTheRunsOfScatteredMessages) {
  const Cluster c = toy(2, 1);
  const EngineSwitch sw("gpt3-1.3b", "tp=2", "dp=2", c, 2, std::uint64_t{256} << 20);
  const auto& tr = sw.traces;
  std::uint64_t scattered = 0, runs = 0, bytes = 0;
  for (const auto& t : tr)
    for (const auto& e : t.events) {
      if (e.kind != exec::ScheduleEvent::Kind::kPost) continue;
      EXPECT_LE(e.send_runs, std::max<std::uint64_t>(1, e.send_bytes / 1024));  // direct: runs of 1 KiB or more
      EXPECT_LE(e.recv_runs, std::max<std::uint64_t>(1, e.recv_bytes / 1024));
      if (e.recv_runs > 1) ++scattered, runs += e.recv_runs, bytes += e.recv_bytes;
    }
  EXPECT_GT(scattered, 0u);
  // A run is one row of a row-parallel weight's shard: 1024 (attention out) or 4096 (fc2)
  // elements of 2 (param, grad) or 4 bytes (master, exp_avg, exp_avg_sq).
  EXPECT_GE(bytes / runs, 2048u);
  EXPECT_LE(bytes / runs, 16384u);
  EXPECT_GT(simulate(tr, c, {.run_seconds = 1e-6}).seconds, simulate(tr, c).seconds + 1e-6 * (runs / 2 - 1));
}

// The wave cut by hand (exec/wave_agreement.h): budget 1600 -> a wave holds at most 100 bytes
// of load per rank. Loads per key (rank 0; rank 1): 60;0, 30;50, 20;60, 0;0, 90;10. Ascending:
// keys 0-1 fit (90; 50), key 2 would make rank 0 110 -> wave 1 takes keys 2-3 (20; 60), key 4
// would make rank 0 110 -> wave 2. An empty key never opens a wave.
TEST(WaveAgreement, CutsByHandAndSharedEqualsGathered) {
  const std::vector<float> r0 = {60, -60, 30, -30, 20, 20, 0, 0, 90, 0}, r1 = {0, 0, 50, 50, 60, 0, 0, 0, 10, 10};
  exec::WaveStats stats{2, 5, r0};
  stats.values.insert(stats.values.end(), r1.begin(), r1.end());
  const exec::WaveCut up = exec::cut_waves(stats, exec::WaveOrder::kAscending, 1600);
  EXPECT_EQ(up.wave_of_key, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(up.waves, 3);
  const exec::WaveCut down = exec::cut_waves(stats, exec::WaveOrder::kDescending, 1600);
  // Descending: keys 4-3 (90; 10), key 2 would make rank 0 110 -> wave 1 (20; 60), key 1 would
  // make rank 1 110 -> wave 2 takes keys 1-0 (90; 50).
  EXPECT_EQ(down.wave_of_key, (std::vector<int>{2, 2, 1, 0, 0}));
  EXPECT_EQ(down.waves, 3);

  exec::SharedWaveAgreement shared;
  shared.contribute(1, 2, r1);
  EXPECT_THROW(shared.cut(exec::WaveOrder::kAscending, 1600), InvariantError);  // rank 0 missing
  shared.contribute(0, 2, r0);
  EXPECT_THROW(shared.contribute(0, 2, r0), InvariantError);                     // twice
  EXPECT_THROW(shared.contribute(1, 2, std::vector<float>(4)), InvariantError);  // other key count
  for (auto order : {exec::WaveOrder::kAscending, exec::WaveOrder::kDescending, exec::WaveOrder::kBalanced}) {
    const auto cut = shared.cut(order, 1600);
    EXPECT_EQ(cut->wave_of_key, exec::cut_waves(stats, order, 1600).wave_of_key);
    EXPECT_EQ(cut.get(), shared.cut(order, 1600).get());  // computed once
  }
  shared.give_max(7, 0, 2, {1, 5});
  EXPECT_THROW(shared.max_of(7), InvariantError);
  shared.give_max(7, 1, 2, {3, 2});
  EXPECT_EQ(shared.max_of(7), (std::vector<double>{3, 5}));
}

// The tracer shares one wave agreement among all processes (exec/wave_agreement.h); its traces
// must be the schedules a real run performs. Each process here runs the engine for real (data,
// the pool allocator, its own all-gathered agreement) and records the trace of the dry run
// that precedes its real run; every event must match the shared path's, and every destination
// byte must hold the oracle's value. Page-aligned layouts in 4 KiB pages (the tracer's dry
// allocator models those; state in huge pages copies its keeps instead), so kept runs are remapped.
TEST(Simulator, SharedAgreementTracesEqualARealRunsTraces) {
  vps::ModelSpec model = vps::model_from_name("tiny-dense");  // scaled up: 0.5-4 MiB buffers
  model.hidden = 256;
  model.head_dim = model.hidden / model.heads;
  model.vocab = 2048;
  model.ffn = 704;
  vps::LayoutOptions lo;
  lo.bucket_elems = 40'000'000;
  lo.align_elems = vps::kPageAlignElems;
  for (const auto& [from, to] :
       {std::pair<const char*, const char*>{"pp=2,dp=2", "tp=2,pp=2"}, {"tp=2,dp=2", "dp=3"}}) {
    SCOPED_TRACE(std::string(from) + " -> " + to);
    const vps::Layout src(model, vps::ParallelConfig::parse(from), lo);
    const vps::Layout dst(model, vps::ParallelConfig::parse(to), lo);
    const int world = std::max(src.config().world_size(), dst.config().world_size());
    const plan::Topology topo = toy(2, 1).topology(world);
    const plan::Planner planner(src, dst, topo);
    exec::TransitionOptions opt;
    opt.mem_budget = 1 << 20;  // several waves
    opt.topology = topo;
    const auto shared = trace_switch(planner, lo.elem_bytes, opt);

    const auto plans = planner.plan_all();
    std::vector<ScheduleTrace> real(static_cast<std::size_t>(world));
    std::vector<std::string> wrong(static_cast<std::size_t>(world));
    std::vector<std::uint64_t> classes(static_cast<std::size_t>(world));
    comm::InprocOptions nodes;  // on the toy cluster's nodes, as the tracer places them: two link classes
    nodes.ranks_per_node = topo.gpus_per_node;
    comm::run_ranks(
        world,
        [&](comm::Transport& t) {
          const int me = t.rank();
          const vps::RankLayout sl = planner.src_rank_layout(me), dl = planner.dst_rank_layout(me);
          exec::PoolAllocator pool(exec::HugePages::kOff);
          std::vector<std::byte*> a, b;
          for (const auto& buf : sl.buffers) {
            const int e = lo.elem_bytes[static_cast<int>(buf.kind)];
            a.push_back(pool.allocate(static_cast<std::size_t>(buf.numel) * e));
            testing::fill_buffer(src.tensors(), buf, e, a.back());
          }
          exec::TransitionOptions mine = opt;
          mine.trace = &real[me];
          classes[me] = exec::run_transition(plans[me], sl, a, dl, b, lo.elem_bytes, t, pool, mine).link_classes;
          for (std::size_t j = 0; j < dl.buffers.size(); ++j) {
            const int e = lo.elem_bytes[static_cast<int>(dl.buffers[j].kind)];
            if (auto m = testing::verify_buffer(dst.tensors(), dl.buffers[j], e, b[j]))
              wrong[me] = m->str(dst.tensors());
            pool.release(b[j], static_cast<std::size_t>(dl.buffers[j].numel) * e);
          }
        },
        nodes);
    ASSERT_EQ(shared.size(), real.size());
    std::size_t keeps = 0, posts = 0;
    for (int p = 0; p < world; ++p) {
      EXPECT_EQ(wrong[p], "") << "process " << p;
      EXPECT_EQ(classes[p], 2u) << "process " << p;  // two nodes: one pipeline per link class
      ASSERT_EQ(shared[p].events.size(), real[p].events.size()) << "process " << p;
      for (std::size_t i = 0; i < real[p].events.size(); ++i) {
        const auto& x = shared[p].events[i];
        const auto& y = real[p].events[i];
        const auto fields = [](const exec::ScheduleEvent& e) {
          return std::tuple(e.kind, e.wave, e.peer, e.round, e.send_bytes, e.recv_bytes, e.pack_bytes, e.unpack_bytes,
                            e.bytes, e.send_runs, e.recv_runs);
        };
        ASSERT_TRUE(fields(x) == fields(y))
            << "process " << p << " event " << i << ": kind " << int(x.kind) << " / " << int(y.kind) << ", bytes "
            << x.bytes << " / " << y.bytes << ", send " << x.send_bytes << " / " << y.send_bytes;
        keeps += y.kind == exec::ScheduleEvent::Kind::kKeep;
        posts += y.kind == exec::ScheduleEvent::Kind::kPost;
      }
    }
    EXPECT_GT(keeps, 0u);
    EXPECT_GT(posts, static_cast<std::size_t>(world));
    int waves = 0;
    for (const auto& tr : real)
      for (const auto& e : tr.events) waves = std::max(waves, e.wave + 1);
    EXPECT_GE(waves, 2);
  }
}

}  // namespace
}  // namespace dynatrain::sim
