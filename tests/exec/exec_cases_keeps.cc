// The keep cases of exec_cases.h: handed-over buffers, remapped keeps, the measured keep path.
#include "tests/exec/exec_cases.h"

#include <algorithm>

#include "common/error.h"
#include "testing/fill.h"
#include "exec/machine_rates.h"
#include "exec/pool_allocator.h"
#include "testing/state_oracle.h"
#include "vps/model_spec.h"

namespace dynatrain::exec::cases {
using namespace dynatrain::testing;

// tiny-dense dp=4,zero=0 -> dp=2,zero=0 (replicated state; ranks 0 and 1 keep everything) and
// the same at dp=4,zero=1 -> dp=2,zero=1: every kept buffer with the identical segments at
// identical offsets is handed over, not copied. zero=0: all kept bytes; zero=1: the weights and
// grads (the optimizer shards change), which the pool must then give back like any buffer; and
// dp=2,zero=0 -> dp=4,zero=0, where the handed-over buffers are sent from too.
void zero_copy_keep_case(comm::Transport& t) {
  TransitionCase c;
  c.kind = "zerocopy";
  c.model = "tiny-dense";
  c.world = 4;
  CASE_REQUIRE(t.size() == 4);
  c.from = "dp=4,zero=0";
  c.to = "dp=2,zero=0";
  const TransitionStats all = run_case(c, t);
  if (t.rank() < 2) {
    CASE_REQUIRE(all.bytes_kept > 0);
    CASE_REQUIRE(all.kept_zero_copy_bytes == all.bytes_kept, all.kept_zero_copy_bytes, " of ", all.bytes_kept);
  }
  c.from = "dp=4,zero=1";
  c.to = "dp=2,zero=1";
  const TransitionStats part = run_case(c, t);
  CASE_REQUIRE(part.kept_zero_copy_bytes <= part.bytes_kept);
  std::uint64_t handed = 0, kept = 0;
  for (auto v : gather_u64(t, part.kept_zero_copy_bytes)) handed += v;
  for (auto v : gather_u64(t, part.bytes_kept)) kept += v;
  CASE_REQUIRE(handed > 0 && handed < kept, handed, " of ", kept);
  // The way back (a grow): ranks 0 and 1 keep everything and send it to 2 and 3 as well; their
  // buffers are still handed over, and the sends read them there.
  c.from = "dp=2,zero=0";
  c.to = "dp=4,zero=0";
  const TransitionStats grow = run_case(c, t);
  if (t.rank() < 2) {
    CASE_REQUIRE(grow.bytes_kept > 0 && grow.bytes_sent > 0, grow.bytes_kept, " kept, ", grow.bytes_sent, " sent");
    CASE_REQUIRE(grow.kept_zero_copy_bytes == grow.bytes_kept, grow.kept_zero_copy_bytes, " of ", grow.bytes_kept);
  }
  // At a step boundary (grads zeroed, not moved) a grads buffer laid out alike in both layouts
  // is zeroed where it is: ranks 0 and 1 hold the same tp halves before and after a lend of 2 and
  // 3 and after taking them back; 2 and 3 get fresh zeroed grads back.
  c.zeroed_kinds = kStepBoundaryKinds;
  for (const auto& [from, to] :
       {std::pair{"tp=2,dp=2,zero=1", "tp=2,dp=1,zero=1"}, {"tp=2,dp=1,zero=1", "tp=2,dp=2,zero=1"}}) {
    c.from = from, c.to = to;
    const TransitionStats z = run_case(c, t);
    CASE_REQUIRE(z.zeroed_in_place_bytes == (t.rank() < 2 ? z.zeroed_bytes : 0), z.zeroed_in_place_bytes, " of ",
                 z.zeroed_bytes, " zeroed in place, ", from, " -> ", to);
    CASE_REQUIRE(t.rank() >= 2 || z.zeroed_bytes > 0);
  }
  // Left unset (fill_zeroed false, what the Python job asks for): the same switches zero
  // nothing; grads handed over (ranks 0 and 1) still hold the step's bytes, which run_case
  // counts and then zeroes as the caller must.
  c.fill_zeroed = false;
  for (const auto& [from, to] :
       {std::pair{"tp=2,dp=2,zero=1", "tp=2,dp=1,zero=1"}, {"tp=2,dp=1,zero=1", "tp=2,dp=2,zero=1"}}) {
    c.from = from, c.to = to;
    std::uint64_t left = 0;
    c.unset_left = &left;
    const TransitionStats z = run_case(c, t);
    CASE_REQUIRE(z.zeroed_bytes == 0 && z.zeroed_in_place_bytes == 0 && (t.rank() >= 2 || z.unset_bytes > 0),
                 z.zeroed_bytes, " zeroed, ", z.unset_bytes, " unset, ", from, " -> ", to);
    CASE_REQUIRE(t.rank() >= 2 || left > 0, left, " non-zero grad bytes left on a rank that kept its grads buffer");
  }
}

namespace {
// 4 ranks of mid-dense, one 40M-element bucket a kind, 8 MiB budget, page-aligned tensors.
TransitionCase mid_dense_aligned_case(const std::string& kind) {
  TransitionCase c;
  c.kind = kind;
  c.model = "mid-dense";
  c.bucket_elems = 40'000'000;
  c.budget = 8 << 20;
  c.world = 4;
  c.align_pages = true;
  return c;
}
}  // namespace

// mid-dense (one 40M-element bucket a kind: 2-16 MiB buffers, page-wise at 8 MiB) with
// page-aligned tensors. pp=2,dp=2 -> pp=4: a stage's kept layers sit at new offsets in its
// buffers; dp=4 -> dp=2 (zero=1): the optimizer shards grow around the kept half. Unaligned, the
// PP switch remaps almost nothing (offsets agree modulo a page only by chance).
void remapped_keep_case(comm::Transport& t) {
  TransitionCase c = mid_dense_aligned_case("remap");
  CASE_REQUIRE(t.size() == 4);
  auto not_copied_share = [&](std::uint64_t* remapped_out) {
    const TransitionStats s = run_case(c, t);
    std::uint64_t kept = 0, not_copied = 0, remapped = 0;
    for (auto v : gather_u64(t, s.bytes_kept)) kept += v;
    for (auto v : gather_u64(t, s.kept_zero_copy_bytes + s.kept_remapped_bytes)) not_copied += v;
    for (auto v : gather_u64(t, s.kept_remapped_bytes)) remapped += v;
    CASE_REQUIRE(kept > 0, c.name());
    *remapped_out = remapped;
    return static_cast<double>(not_copied) / static_cast<double>(kept);
  };
  std::uint64_t remapped = 0;
  for (const auto& [from, to] : {std::pair<const char*, const char*>{"pp=2,dp=2", "pp=4"}, {"dp=4", "dp=2"}}) {
    c.from = from;
    c.to = to;
    const double share = not_copied_share(&remapped);
    CASE_REQUIRE(share >= 0.8, c.name(), ": ", share, " of kept bytes not copied");
    CASE_REQUIRE(remapped > 0, c.name());
  }
  c.from = "pp=2,dp=2";
  c.to = "pp=4";
  c.align_pages = false;
  const double unaligned = not_copied_share(&remapped);
  CASE_REQUIRE(unaligned < 0.8, "unaligned PP: ", unaligned);
}

void keep_path_case(comm::Transport& t) {
  TransitionCase c = mid_dense_aligned_case("keep_path");
  c.from = "pp=2,dp=2";
  c.to = "pp=4";
  CASE_REQUIRE(t.size() == 4);
  auto remapped_over_ranks = [&](KeepPath path, TransitionStats* mine) {
    c.keep_path = path;
    *mine = run_case(c, t);  // verifies every destination byte
    std::uint64_t remapped = 0;
    for (auto v : gather_u64(t, mine->kept_remapped_bytes)) remapped += v;
    return remapped;
  };
  TransitionStats s;
  c.huge_pages = HugePages::kOff;  // 4 KiB pages: the measured choice below
  CASE_REQUIRE(remapped_over_ranks(KeepPath::kCopy, &s) == 0, "forced copy remapped pages");
  CASE_REQUIRE(s.keep_path == "copy", s.keep_path);
  CASE_REQUIRE(remapped_over_ranks(KeepPath::kRemap, &s) > 0, "forced remap remapped nothing");
  CASE_REQUIRE(s.keep_path == "remap" && s.remap_min_bytes == kPageBytes, s.keep_path);
  std::atomic<std::uint64_t> progress{0};
  c.progress = &progress;
  remapped_over_ranks(KeepPath::kAuto, &s);
  CASE_REQUIRE(progress.load() > 0);
  const MachineRates& rates = machine_rates();
  CASE_REQUIRE(s.warm_copy_bytes_per_s == rates.warm_copy_bytes_per_s && s.warm_copy_bytes_per_s > 0);
  if (rates.min_remap_bytes == UINT64_MAX) {
    CASE_REQUIRE(s.kept_remapped_bytes == 0 && s.keep_path == "copy (a remap measured slower)", s.keep_path);
  } else {
    CASE_REQUIRE(s.remap_min_bytes == rates.min_remap_bytes, s.remap_min_bytes);
    CASE_REQUIRE(s.keep_path.rfind("remap runs >= ", 0) == 0, s.keep_path);
  }
  CASE_REQUIRE(!s.huge_pages);
  // State in huge pages (where the kernel allows them): auto remaps whole 2 MiB pages only (where
  // one remap call is measured cheaper than copying 2 MiB), a forced remap still remaps 4 KiB
  // runs (and splits the pages it moves), every destination byte verified either way.
  c.huge_pages = HugePages::kAuto;
  c.progress = nullptr;  // counted for the run above only
  const bool huge = thp_mode() != ThpMode::kNever;
  // dp=2 -> dp=1 (zero=1): rank 0 keeps the first half of each optimizer shard (8 MiB) at offset
  // 0 of both buffers, its tensors' pieces continuing each other: whole 2 MiB pages move.
  c.from = "dp=2";
  c.to = "dp=1";
  const std::uint64_t remapped = remapped_over_ranks(KeepPath::kAuto, &s);
  CASE_REQUIRE(s.huge_pages == huge, s.huge_pages);
  if (huge && rates.remap_call_seconds * rates.warm_copy_bytes_per_s < static_cast<double>(kHugePageBytes)) {
    CASE_REQUIRE(s.keep_path == "remap whole 2 MiB pages, copy the rest (state in huge pages)", s.keep_path);
    CASE_REQUIRE(s.remap_min_bytes == kHugePageBytes && s.kept_remapped_bytes % kHugePageBytes == 0,
                 s.kept_remapped_bytes);
    CASE_REQUIRE(remapped > 0, "no whole 2 MiB page remapped");
  } else if (huge) {
    CASE_REQUIRE(remapped == 0 && s.keep_path.rfind("copy (state in huge pages", 0) == 0, s.keep_path);
  }
  c.from = "pp=2,dp=2";
  c.to = "pp=4";
  CASE_REQUIRE(remapped_over_ranks(KeepPath::kRemap, &s) > 0, "forced remap remapped nothing in huge pages");
}

}  // namespace dynatrain::exec::cases
