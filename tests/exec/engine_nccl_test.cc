// The engine on device state: run_transition with exec/cuda's CudaMemory as allocator (keeps,
// packs, unpacks and zeroing on the device) over comm/nccl's NcclTransport (its transfers and
// the engine's host-side agreements). Source state is filled on the host with the content
// oracle and uploaded; after the switch every destination element is downloaded and checked.
// Run as `mpirun -np N test_exec_nccl` with one CUDA device per rank; registered at one process.
// Every test skips (GTEST_SKIP) without enough devices, so it passes everywhere.
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "comm/nccl/nccl_transport.h"
#include "exec/cuda/cuda_memory.h"
#include "exec/pool_allocator.h"
#include "plan/planner.h"
#include "testing/state_oracle.h"
#include "tests/comm/mpi_gtest_main.h"
#include "tests/exec/exec_cases.h"

namespace dynatrain::exec {
namespace {

std::string skip_reason(int world_size) {
  const int n = cuda::device_count();
  if (n == 0) return "no CUDA device";
  if (n < world_size) return "needs one CUDA device per rank";
  return "";
}

std::size_t buffer_bytes(const vps::Layout& l, const vps::LocalBuffer& b) {
  return static_cast<std::size_t>(b.numel) * static_cast<std::size_t>(l.options().elem_bytes[static_cast<int>(b.kind)]);
}

// One switch of this rank's state between `src` and `dst` on the device; returns how many
// destination buffers hold a wrong element (the first described in `first`).
// `mem` is the state memory (CudaMemory; PoolAllocator for the host run of the same harness),
// `sync` waits for its work.
int switch_on_device(const vps::Layout& src, const vps::Layout& dst, comm::Transport& t, StateAllocator& mem,
                     const std::function<void()>& sync, std::size_t budget, std::string* first) {
  const int me = t.rank();
  const plan::Planner planner(src, dst);
  const plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  const vps::RankLayout sl = src.rank_layout(me), dl = dst.rank_layout(me);
  PoolAllocator host;
  std::vector<std::byte*> filled = testing::allocate_filled(src, sl, host);
  std::vector<std::byte*> a(filled.size(), nullptr), b;
  for (std::size_t i = 0; i < filled.size(); ++i) {
    if (!filled[i]) continue;
    a[i] = mem.allocate(buffer_bytes(src, sl.buffers[i]));
    mem.copy(a[i], filled[i], buffer_bytes(src, sl.buffers[i]));
  }
  sync();
  testing::release_all(src, sl, filled, host);
  TransitionOptions opt;
  opt.mem_budget = budget;
  run_transition(plan, sl, a, dl, b, src.options().elem_bytes, t, mem, opt);
  std::vector<std::vector<std::byte>> down(b.size());
  std::vector<std::byte*> view(b.size(), nullptr);
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (!b[i]) continue;
    down[i].resize(buffer_bytes(dst, dl.buffers[i]));
    mem.copy(down[i].data(), b[i], down[i].size());
    view[i] = down[i].data();
  }
  sync();
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i]) mem.release(b[i], buffer_bytes(dst, dl.buffers[i]));
  return testing::verify_state(dst, dl, view, first);
}

std::unique_ptr<comm::NcclTransport> nccl_over(comm::Transport& host, cuda::CudaMemory& mem) {
  comm::NcclOptions o;
  o.device = mem.device();
  o.stream = mem.stream();
  return comm::NcclTransport::over(host, o);
}

// Keeps only (dp=N to dp=N): packed source buffers become page-aligned ones with other buckets,
// so every kept tensor moves to a new offset (strided and contiguous copies).
void keeps_into_a_new_layout(comm::Transport& t, StateAllocator& mem, const std::function<void()>& sync) {
  const vps::ModelSpec model = cases::case_model("tiny-dense");
  vps::LayoutOptions packed, aligned;
  packed.bucket_elems = 700;
  aligned.bucket_elems = 1000;
  aligned.align_elems = vps::kPageAlignElems;
  const std::string cfg = "dp=" + std::to_string(t.size());
  const vps::Layout src(model, vps::ParallelConfig::parse(cfg), packed);
  const vps::Layout dst(model, vps::ParallelConfig::parse(cfg), aligned);
  std::string first;
  EXPECT_EQ(switch_on_device(src, dst, t, mem, sync, 512 << 10, &first), 0) << first;
}

// The engine's random switches that fit this many ranks (tp, pp, dp, ep, zero, grow, shrink,
// hybrid), every element checked.
void random_switches(comm::Transport& t, StateAllocator& mem, const std::function<void()>& sync) {
  int ran = 0;
  for (const cases::TransitionCase& c : cases::transition_cases(t.size())) {
    if (c.world > t.size() || c.align_pages || c.zeroed_kinds != 0 || c.gpus_per_node > 0) continue;
    vps::LayoutOptions lo;
    lo.bucket_elems = c.bucket_elems;
    const vps::ModelSpec model = cases::case_model(c.model);
    const vps::Layout src(model, vps::ParallelConfig::parse(c.from), lo);
    const vps::Layout dst(model, vps::ParallelConfig::parse(c.to), lo);
    std::string first;
    EXPECT_EQ(switch_on_device(src, dst, t, mem, sync, c.budget, &first), 0) << c.name() << ": " << first;
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// The harness itself on host memory over MPI: runs everywhere, so the device runs below can only
// fail for the device's or NCCL's sake.
TEST(EngineHarness, OnHostMemory) {
  auto host = comm::MpiTransport::world();
  PoolAllocator pool;
  keeps_into_a_new_layout(*host, pool, [] {});
  random_switches(*host, pool, [] {});
}

// Runs `body` on this rank's device (CudaMemory on device `rank`, NCCL on its stream), or skips.
void on_device(void (*body)(comm::Transport&, StateAllocator&, const std::function<void()>&)) {
  auto host = comm::MpiTransport::world();
  if (const std::string why = skip_reason(host->size()); !why.empty()) GTEST_SKIP() << why;
  cuda::CudaMemory mem(host->rank());
  auto nccl = nccl_over(*host, mem);
  body(*nccl, mem, [&] { mem.synchronize(); });
}

TEST(EngineOnDevice, KeepsIntoANewLayout) { on_device(keeps_into_a_new_layout); }
TEST(EngineOnDevice, RandomSwitchesEveryElementChecked) { on_device(random_switches); }

}  // namespace
}  // namespace dynatrain::exec

int main(int argc, char** argv) { return dynatrain::comm::testing::run_mpi_gtest(argc, argv, "test_exec_nccl"); }
