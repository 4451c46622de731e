// Implementation notes (the contract is in engine.h, the guarantees in exec/README.md).
//
// run_transition = prepare (validate, count per-buffer outgoing bytes, keep planning)
//                + agree (all_gather_bytes: tensor count, slab rows, per-key load and growth)
//                + split the plan at slab boundaries, choose page-wise buffers
//                + for each candidate order: cut waves and chunks, execute(dry)
//                + agree on the order (one all_gather_bytes), execute(dry), execute(real).
// execute() is one function for the dry run and the real run, so the predicted peak is the
// accounted peak by construction: the dry run performs the same allocate / release / commit /
// decommit events in the same order, only without touching data or the transport.
//
// This file is the orchestration; each step's concept lives beside it: chunking.h (chunks),
// round_schedule.h (the XOR order and link classes), direct_runs.h (chunks without staging),
// keep_plan.h (handed-over and remapped keeps), memory_ledger.h (accounting, staging),
// pipeline.h (rounds in flight), wave_agreement.h (waves).
#include "exec/engine.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "exec/chunking.h"
#include "exec/direct_runs.h"
#include "exec/huge_pages.h"
#include "exec/keep_plan.h"
#include "exec/machine_rates.h"
#include "exec/memory_ledger.h"
#include "exec/piece_geometry.h"
#include "exec/pipeline.h"
#include "exec/round_schedule.h"
#include "exec/wave_agreement.h"

namespace dynatrain::exec {
namespace {

constexpr std::size_t kMinBudget = 256;

class Engine {
 public:
  Engine(const plan::RankPlan& plan, const vps::RankLayout& sl, std::vector<std::byte*>& src, const vps::RankLayout& dl,
         std::vector<std::byte*>& dst, const vps::ElemBytes& eb, comm::Transport& t, StateAllocator& alloc,
         const TransitionOptions& opt)
      : plan_(plan),
        src_(src),
        dst_(dst),
        eb_(eb),
        t_(t),
        alloc_(alloc),
        opt_(opt),
        g_{sl, dl, eb},
        direct_(g_, wp_, t, opt.direct_runs, src, dst) {}

  TransitionStats run() {
    const auto t0 = Clock::now();
    const ProcessUsage u0 = process_usage();
    prepare();
    stats_.agree_seconds = seconds_since(t0);
    const WaveOrder order = choose_order();
    cut_waves(order);
    trace_ = opt_.trace;
    stats_.predicted_peak_bytes = execute(true);
    choose_commit_ahead();
    trace_ = nullptr;
    stats_.dry_seconds = seconds_since(t0) - stats_.agree_seconds;
    stats_.peak_bytes = opt_.dry_only ? stats_.predicted_peak_bytes : execute(false);
    fill_stats(order);
    stats_.seconds = seconds_since(t0);
    const ProcessUsage u1 = process_usage();
    stats_.system_seconds = u1.system_seconds - u0.system_seconds;
    stats_.page_faults = u1.page_faults - u0.page_faults;
    return stats_;
  }

 private:
  bool zeroed(vps::StateKind k) const { return (opt_.zeroed_kinds >> static_cast<int>(k)) & 1u; }

  // Everything before the first dry run: checks, keep planning, the collective agreements.
  void prepare() {
    links_ = choose_link_classes(t_, opt_.overlap_links, opt_.topology);
    validate();
    detect_fanout();
    adoptions_ = find_adoptions(plan_, g_, alloc_.can_adopt(), opt_.in_place, opt_.zeroed_kinds, src_left_, stats_);
    if (alloc_.can_adopt() && !opt_.in_place) adopt_zeroed(g_, opt_.zeroed_kinds, src_, adoptions_);
    for (std::size_t j = 0; j < mem_.dst_size.size(); ++j)
      if (opt_.fill_zeroed && zeroed(g_.dst.buffers[j].kind) && adoptions_.dst_to_src[j] >= 0)
        stats_.zeroed_in_place_bytes += mem_.dst_size[j];
    agree_slabs();
    split_plan();
    agree_waves();
    choose_pagewise(mem_, wp_, g_, opt_.mem_budget, alloc_.pagewise_min_bytes(), adoptions_);
    const auto [min_remap, unit] = choose_keep_path();
    remaps_ = find_remaps(wp_, g_, alloc_, mem_.src_size, mem_.dst_size, min_remap, unit);
  }

  // The shortest kept run to remap (UINT64_MAX: copy every keep) and the unit a remap moves
  // (whole 2 MiB pages under kAuto in huge pages: a 4 KiB run would split them), from
  // TransitionOptions::keep_path and, under kAuto, this machine's measured rates (measured once
  // per process, and only when the allocator can move pages at all); the choice goes into the stats.
  std::pair<std::uint64_t, std::uint64_t> choose_keep_path() {
    stats_.huge_pages = alloc_.huge_pages();
    if (!alloc_.can_move_pages() || opt_.keep_path == KeepPath::kCopy) return {UINT64_MAX, kPageBytes};
    if (opt_.keep_path == KeepPath::kRemap) {
      stats_.keep_path = "remap";
      stats_.remap_min_bytes = kPageBytes;
      return {kPageBytes, kPageBytes};
    }
    const MachineRates& r = machine_rates();
    stats_.warm_copy_bytes_per_s = r.warm_copy_bytes_per_s;
    stats_.fresh_write_bytes_per_s = r.fresh_write_bytes_per_s;
    stats_.remap_call_seconds = r.remap_call_seconds;
    if (stats_.huge_pages) {  // whole 2 MiB pages move by one page-table entry each: one call's cost
      if (r.remap_call_seconds * r.warm_copy_bytes_per_s >= static_cast<double>(kHugePageBytes)) {
        stats_.keep_path = "copy (state in huge pages; a remap call measured slower than copying 2 MiB)";
        return {UINT64_MAX, kPageBytes};
      }
      stats_.remap_min_bytes = kHugePageBytes;
      stats_.keep_path = "remap whole 2 MiB pages, copy the rest (state in huge pages)";
      return {kHugePageBytes, kHugePageBytes};
    }
    if (r.min_remap_bytes == UINT64_MAX) {
      stats_.keep_path = "copy (a remap measured slower)";
      return {UINT64_MAX, kPageBytes};
    }
    stats_.remap_min_bytes = r.min_remap_bytes;
    stats_.keep_path = "remap runs >= " + std::to_string(r.min_remap_bytes >> 10) + " KiB, copy below (measured)";
    return {r.min_remap_bytes, kPageBytes};
  }

  // Receives committed ahead (TransitionOptions::commit_ahead) when the dry run just made shows
  // that the peak stays within the engine's bound, max(source, destination) + budget, or at the
  // peak without (the budget is the switch's allowance for memory beyond its state: staging,
  // and here the received granules committed before the keeps have given their pages back).
  // The prediction is then that run's ahead_peak, and a trace is recorded again by a dry run
  // that commits ahead, so it shows what the real run does.
  void choose_commit_ahead() {
    const std::uint64_t bound =
        std::max<std::uint64_t>(stats_.predicted_peak_bytes, std::max(src_total_, dst_total_) + opt_.mem_budget);
    commit_ahead_ = opt_.commit_ahead && ahead_bytes_ > 0 && ahead_peak_ <= bound;
    if (!commit_ahead_) return;
    stats_.predicted_peak_bytes = ahead_peak_;
    stats_.committed_ahead_bytes = ahead_bytes_;
    if (!trace_) return;
    trace_->events.clear();
    execute(true);
  }

  // kAuto: dry-run every candidate order; all ranks take the one whose worst rank overshoots
  // max(source, destination) the least (the earliest on a tie).
  WaveOrder choose_order() {
    if (opt_.order != WaveOrder::kAuto) return opt_.order;
    constexpr WaveOrder kCandidates[3] = {WaveOrder::kAscending, WaveOrder::kDescending, WaveOrder::kBalanced};
    const std::uint64_t floor = std::max(src_total_, dst_total_);
    std::vector<double> mine(3);
    for (int i = 0; i < 3; ++i) {
      cut_waves(kCandidates[i]);
      mine[i] = static_cast<double>(execute(true)) - static_cast<double>(floor);
    }
    const std::vector<double> worst = max_over_ranks(kAgreeOrder, mine);
    WaveOrder order = opt_.order;
    double best = 0;
    for (int i = 0; i < 3; ++i)
      if (i == 0 || worst[i] < best) best = worst[i], order = kCandidates[i];
    return order;
  }

  void fill_stats(WaveOrder order) {
    const bool desc = order == WaveOrder::kDescending;
    stats_.wave_order = order == WaveOrder::kAscending ? "ascending" : desc ? "descending" : "balanced";
    stats_.descending = desc;
    stats_.waves = static_cast<std::uint64_t>(nwaves_);
    stats_.link_classes = static_cast<std::uint64_t>(links_.classes);
    stats_.rounds_in_flight = static_cast<std::uint64_t>(depth_[links_.classes - 1]);
    stats_.chunk_bytes = cap_;
    stats_.granule_bytes = mem_.granule;
    stats_.pagewise_buffers = mem_.pagewise_count();
    stats_.src_bytes = src_total_;
    stats_.dst_bytes = dst_total_;
  }

  // ---- validation ----
  void check_piece(const plan::Piece& p, bool local_src, bool local_dst) const {
    const int me = t_.rank();
    const vps::RankLayout& sl = g_.src;
    const vps::RankLayout& dl = g_.dst;
    if (local_src) {
      DT_CHECK(p.src_rank == me, "piece from rank ", p.src_rank, " in the sends of rank ", me);
      DT_CHECK(p.src_buffer < sl.buffers.size() && p.src_segment < sl.buffers[p.src_buffer].segments.size(),
               "piece names source buffer ", p.src_buffer, " segment ", p.src_segment);
      DT_CHECK(sl.buffers[p.src_buffer].kind == p.kind, "piece kind differs from source buffer");
      DT_CHECK(g_.src_seg(p).tensor == p.tensor && g_.src_seg(p).box.contains(p.box), "piece box ", p.box.str(),
               " outside source segment ", g_.src_seg(p).box.str());
    }
    if (local_dst) {
      DT_CHECK(p.dst_rank == me, "piece to rank ", p.dst_rank, " in the receives of rank ", me);
      DT_CHECK(p.dst_buffer < dl.buffers.size() && p.dst_segment < dl.buffers[p.dst_buffer].segments.size(),
               "piece names destination buffer ", p.dst_buffer, " segment ", p.dst_segment);
      DT_CHECK(dl.buffers[p.dst_buffer].kind == p.kind, "piece kind differs from destination buffer");
      DT_CHECK(g_.dst_seg(p).tensor == p.tensor && g_.dst_seg(p).box.contains(p.box), "piece box ", p.box.str(),
               " outside destination segment ", g_.dst_seg(p).box.str());
    }
  }

  void validate() {
    DT_CHECK_EQ(plan_.rank, t_.rank());
    DT_CHECK_EQ(src_.size(), g_.src.buffers.size());
    if (opt_.mem_budget < kMinBudget)
      DT_INPUT_ERROR("memory budget ", opt_.mem_budget, " bytes is too small; use at least ", kMinBudget, " bytes");
    // Staging: depth_[c] slots per direction for link class c: 2 * (depth_[0] + depth_[1])
    // slots of cap <= budget / 2.
    depth_ = rounds_in_flight(opt_.rounds_in_flight, links_.classes);
    cap_ = chunk_capacity(opt_.mem_budget, depth_[0] + depth_[1]);
    size_buffers();
    count_plan();
  }

  // Bytes of every buffer; the destination pointers start empty.
  void size_buffers() {
    const vps::RankLayout& sl = g_.src;
    const vps::RankLayout& dl = g_.dst;
    mem_.src_size.resize(sl.buffers.size());
    src_left_.assign(sl.buffers.size(), 0);
    for (std::size_t i = 0; i < sl.buffers.size(); ++i) {
      // A source buffer may be absent (a copy kept without its grads, or without the kinds a
      // replica holds) when the plan reads nothing of it: count_plan() checks that.
      const bool absent = src_[i] == nullptr && !opt_.dry_only;
      mem_.src_size[i] = absent ? 0 : static_cast<std::uint64_t>(sl.buffers[i].numel) * g_.elem(sl.buffers[i].kind);
      src_total_ += mem_.src_size[i];
    }
    mem_.dst_size.resize(dl.buffers.size());
    for (std::size_t j = 0; j < dl.buffers.size(); ++j) {
      mem_.dst_size[j] = static_cast<std::uint64_t>(dl.buffers[j].numel) * g_.elem(dl.buffers[j].kind);
      dst_total_ += mem_.dst_size[j];
    }
    dst_.assign(dl.buffers.size(), nullptr);
  }

  // Checks every piece and counts, per source buffer, the bytes it must send or keep
  // (src_left_), and the bytes of zeroed kinds skipped.
  void count_plan() {
    const int W = t_.size();
    for (const auto& p : plan_.keep) {
      check_piece(p, true, true);
      if (zeroed(p.kind))
        stats_.skipped_bytes_kept += g_.bytes(p);
      else
        src_left_[p.src_buffer] += g_.bytes(p);
    }
    for (const auto& [peer, pieces] : plan_.send) {
      DT_CHECK(peer >= 0 && peer < W && peer != t_.rank(), "send peer ", peer, " of ", W);
      for (const auto& p : pieces) {
        check_piece(p, true, false);
        DT_CHECK_EQ(p.dst_rank, peer);
        if (zeroed(p.kind))
          stats_.skipped_bytes_sent += g_.bytes(p);
        else
          src_left_[p.src_buffer] += g_.bytes(p);
      }
    }
    for (const auto& [peer, pieces] : plan_.recv) {
      DT_CHECK(peer >= 0 && peer < W && peer != t_.rank(), "receive peer ", peer, " of ", W);
      for (const auto& p : pieces) {
        check_piece(p, false, true);
        DT_CHECK_EQ(p.src_rank, peer);
        if (zeroed(p.kind)) stats_.skipped_bytes_received += g_.bytes(p);
      }
    }
    for (std::size_t j = 0; j < g_.dst.buffers.size(); ++j)
      if (zeroed(g_.dst.buffers[j].kind))
        (opt_.fill_zeroed ? stats_.zeroed_bytes : stats_.unset_bytes) += mem_.dst_size[j];
    for (std::size_t i = 0; i < src_left_.size(); ++i)
      DT_CHECK(src_left_[i] == 0 || src_[i] != nullptr || opt_.dry_only, "source buffer ", i,
               " has no data but the plan reads ", src_left_[i], " bytes of it");
  }

  // Fan-out: the same (tensor, kind, box) sent to several peers, and the bytes of it the
  // broadcast cost model would rather broadcast (engine.h: broadcast_preferred).
  void detect_fanout() {
    std::map<std::tuple<std::uint32_t, int, vps::Box>, std::vector<int>> groups;
    for (const auto& [peer, pieces] : plan_.send)
      for (const auto& p : pieces) groups[{p.tensor, static_cast<int>(p.kind), p.box}].push_back(peer);
    const int my_node = opt_.topology.node_of(t_.rank());
    for (const auto& [key, peers] : groups) {
      if (peers.size() < 2) continue;
      const std::uint64_t bytes =
          static_cast<std::uint64_t>(std::get<2>(key).numel()) * static_cast<std::uint64_t>(eb_[std::get<1>(key)]);
      stats_.fanout_bytes += bytes * (peers.size() - 1);
      int off_node = 0;
      for (int q : peers) off_node += opt_.topology.node_of(q) != my_node;
      if (broadcast_preferred(static_cast<int>(peers.size()), off_node, bytes))
        stats_.broadcast_preferred_bytes += bytes * (peers.size() - 1);
    }
    stats_.path = "p2p";
    if (stats_.broadcast_preferred_bytes > 0)
      stats_.path = "p2p (the cost model prefers a broadcast for " + std::to_string(stats_.broadcast_preferred_bytes) +
                    " fan-out bytes; the broadcast path is not implemented)";
  }

  // ---- agreement ----
  // The element-wise maximum of `mine` over all ranks (each agreement step is one): an all_gather
  // over the transport, or, when every rank is a thread of this process, one shared copy
  // (TransitionOptions::shared_waves). Values are exact up to 2^53 either way.
  enum AgreeStep { kAgreeTensors, kAgreeSlabs, kAgreeOrder };
  template <typename T>
  std::vector<T> max_over_ranks(AgreeStep step, const std::vector<T>& mine) {
    std::vector<T> out = mine;
    if (opt_.shared_waves) {
      opt_.shared_waves->give_max(step, t_.rank(), t_.size(), std::vector<double>(mine.begin(), mine.end()));
      t_.barrier();  // every rank's values are in
      const std::vector<double> most = opt_.shared_waves->max_of(step);
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(most[i]);
      return out;
    }
    const std::vector<T> all = comm::all_gather_values(t_, mine);
    for (int r = 0; r < t_.size(); ++r)
      for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = std::max(out[i], all[static_cast<std::size_t>(r) * out.size() + i]);
    return out;
  }

  template <typename Fn>
  void for_each_piece(Fn&& fn) const {
    for (const auto& p : plan_.keep) fn(p);
    for (const auto& [q, v] : plan_.send)
      for (const auto& p : v) fn(p);
    for (const auto& [q, v] : plan_.recv)
      for (const auto& p : v) fn(p);
  }

  // Slabs: every tensor is cut along dim 0 into slabs of `slab_rows_[t]` rows, so that one
  // slab of the whole tensor holds at most mem_budget / 16 bytes. A dim-0 slab of any box is
  // one contiguous run of its row-major storage, so a slab's bytes sit together in every
  // buffer. All ranks agree on the rows (from the largest row length any rank holds).
  void agree_slabs() {
    std::uint64_t local_t = 0;
    for_each_piece([&](const plan::Piece& p) { local_t = std::max<std::uint64_t>(local_t, p.tensor + 1); });
    tensors_ = static_cast<std::size_t>(max_over_ranks(kAgreeTensors, std::vector<std::uint64_t>{local_t})[0]);
    // Per tensor: (rows = largest dim-0 end, row = largest row length in elements).
    std::vector<std::uint64_t> mine(2 * tensors_, 0);
    for_each_piece([&](const plan::Piece& p) {
      std::uint64_t row = 1;
      for (int d = 1; d < p.box.ndim; ++d) row *= static_cast<std::uint64_t>(p.box.extent(d));
      auto& rows = mine[2 * p.tensor];
      rows = std::max(rows, static_cast<std::uint64_t>(p.box.ndim > 0 ? p.box.hi[0] : 1));
      mine[2 * p.tensor + 1] = std::max(mine[2 * p.tensor + 1], row);
    });
    number_keys(max_over_ranks(kAgreeSlabs, mine));
  }

  // Slab rows per tensor from the agreed (rows, row length) of each, and the key space:
  // (expert group, kind, tensor, slab) in that order, densely numbered.
  void number_keys(const std::vector<std::uint64_t>& most) {
    const std::uint64_t slab_elems = std::max<std::uint64_t>(1, opt_.mem_budget / 16 / 4);
    slab_rows_.assign(tensors_, 1);
    key_base_.assign(2 * vps::kNumStateKinds * tensors_ + 1, 0);
    std::vector<std::uint64_t> slabs(tensors_, 1);
    for (std::size_t t = 0; t < tensors_; ++t) {
      const std::uint64_t rows = most[2 * t], row = std::max<std::uint64_t>(1, most[2 * t + 1]);
      slab_rows_[t] = static_cast<std::int64_t>(std::max<std::uint64_t>(1, slab_elems / row));
      slabs[t] = std::max<std::uint64_t>(1, (rows + slab_rows_[t] - 1) / slab_rows_[t]);
    }
    for (std::size_t g = 0, i = 0; g < 2; ++g)
      for (int k = 0; k < vps::kNumStateKinds; ++k)
        for (std::size_t t = 0; t < tensors_; ++t, ++i) key_base_[i + 1] = key_base_[i] + slabs[t];
  }

  // The plan with every piece cut at slab boundaries (in place, so both sides of a pair cut
  // their identical lists identically and still agree on the order); adopted keeps and zeroed
  // kinds left out.
  void split_plan() {
    auto split = [&](const std::vector<plan::Piece>& in, std::vector<plan::Piece>& out) {
      for (const auto& p : in) {
        if (zeroed(p.kind)) continue;  // materialised zeroed at the end instead
        const std::int64_t rows = slab_rows_[p.tensor];
        const std::int64_t lo = p.box.lo[0], hi = p.box.hi[0];
        if (p.box.ndim == 0 || lo / rows == (hi - 1) / rows) {
          out.push_back(p);
          continue;
        }
        for (std::int64_t a = lo; a < hi; a = (a / rows + 1) * rows) {
          plan::Piece q = p;
          q.box.lo[0] = a;
          q.box.hi[0] = std::min(hi, (a / rows + 1) * rows);
          out.push_back(q);
        }
      }
    };
    wp_.rank = plan_.rank;
    std::vector<plan::Piece> keeps;
    for (const auto& p : plan_.keep)
      if (!adoptions_.adopted(p)) keeps.push_back(p);
    split(keeps, wp_.keep);
    for (const auto& [peer, v] : plan_.send) split(v, wp_.send[peer]);
    for (const auto& [peer, v] : plan_.recv) split(v, wp_.recv[peer]);
  }

  std::size_t key_of(const plan::Piece& p, bool expert_group) const {
    const std::size_t base =
        (static_cast<std::size_t>(expert_group) * vps::kNumStateKinds + static_cast<std::size_t>(p.kind)) * tensors_ +
        p.tensor;
    const std::int64_t slab = p.box.ndim > 0 ? p.box.lo[0] / slab_rows_[p.tensor] : 0;
    return key_base_[base] + static_cast<std::size_t>(slab);
  }
  std::size_t src_key(const plan::Piece& p) const { return key_of(p, g_.src.buffers[p.src_buffer].expert_group); }
  std::size_t dst_key(const plan::Piece& p) const { return key_of(p, g_.dst.buffers[p.dst_buffer].expert_group); }

  // Every rank publishes, per key, its load (bytes read from source + bytes written to
  // destination) and its net growth (bytes written - bytes read); cut_waves orders and cuts the
  // keys from these, identically on every rank (exec/wave_agreement.h).
  void agree_waves() {
    const std::size_t nkeys = key_base_.back();
    std::vector<float> mine(2 * nkeys, 0.f);
    auto add = [&](std::size_t key, std::uint64_t read, std::uint64_t written) {
      mine[2 * key] += static_cast<float>(read + written);
      mine[2 * key + 1] += static_cast<float>(written) - static_cast<float>(read);
    };
    for (const auto& p : wp_.keep) add(dst_key(p), g_.bytes(p), g_.bytes(p));
    for (const auto& [q, v] : wp_.send)
      for (const auto& p : v) add(src_key(p), g_.bytes(p), 0);
    for (const auto& [q, v] : wp_.recv)
      for (const auto& p : v) add(dst_key(p), 0, g_.bytes(p));
    if (opt_.shared_waves) {
      opt_.shared_waves->contribute(t_.rank(), t_.size(), mine);
      t_.barrier();  // every rank's stats are in
    } else {
      wave_stats_ = {t_.size(), nkeys, comm::all_gather_values(t_, mine)};
    }
  }

  // The waves of `order` (exec::cut_waves), then the chunks and rounds of every wave.
  void cut_waves(WaveOrder order) {
    if (opt_.shared_waves) {
      const auto cut = opt_.shared_waves->cut(order, opt_.mem_budget);
      wave_of_key_ = cut->wave_of_key;
      nwaves_ = cut->waves;
    } else {
      WaveCut cut = exec::cut_waves(wave_stats_, order, opt_.mem_budget);
      wave_of_key_ = std::move(cut.wave_of_key);
      nwaves_ = cut.waves;
    }
    build_chunks();
  }

  void build_chunks() {
    keeps_.assign(static_cast<std::size_t>(nwaves_), {});
    for (std::uint32_t i = 0; i < wp_.keep.size(); ++i) keeps_[wave_of_key_[dst_key(wp_.keep[i])]].push_back(i);
    work_ = cut_wave_chunks(wp_, nwaves_, eb_, cap_, [&](const plan::Piece& p, bool source) {
      return wave_of_key_[source ? src_key(p) : dst_key(p)];
    });
    rounds_ = build_rounds(work_, t_.rank(), t_.size(), links_);
    // Staging: only chunks that cannot go direct need it.
    send_stage_size_.fill(0);
    recv_stage_size_.fill(0);
    for (auto& wave : work_) {
      for (auto& [peer, pw] : wave) {
        auto& ss = send_stage_size_[links_.of(t_.rank(), peer)];
        auto& rs = recv_stage_size_[links_.of(t_.rank(), peer)];
        for (auto& c : pw.send)
          if (!(c.direct = direct_.chunk_direct(peer, c, true))) ss = std::max(ss, c.bytes);
        for (auto& c : pw.recv)
          if (!(c.direct = direct_.chunk_direct(peer, c, false))) rs = std::max(rs, c.bytes);
      }
    }
  }

  // ---- one run, dry or real ----
  std::uint64_t execute(bool dry) {
    MemoryLedger ledger(mem_, src_left_, remaps_.dst_filled, g_, alloc_, src_, dst_, dry, trace_, stats_);
    ledger.hand_over(adoptions_, opt_.in_place);
    ledger.release_unread_sources(adoptions_);
    const Staging staging = ledger.allocate_staging(links_.classes, depth_, send_stage_size_, recv_stage_size_);
    const PipelineWork work{wp_, work_, rounds_, keeps_, remaps_, links_.classes, depth_};
    const PipelineContext ctx{g_, direct_, ledger, staging, t_, alloc_, src_, dst_, trace_, stats_, opt_.progress};
    ledger.begin_receives(commit_ahead_);
    run_pipeline(work, ctx);
    ledger.check_sources_drained();
    ledger.materialise_destinations(opt_.fill_zeroed ? opt_.zeroed_kinds : 0u);
    if (!dry)  // handed-over buffers that also sent are destinations now
      for (std::size_t i = 0; i < src_.size(); ++i)
        if (opt_.in_place || adoptions_.src_to_dst[i] >= 0) src_[i] = nullptr;
    ledger.release_staging(staging);
    ahead_bytes_ = ledger.ahead_bytes();
    ahead_peak_ = ledger.ahead_peak();
    return ledger.peak();
  }

  const plan::RankPlan& plan_;
  plan::RankPlan wp_;  // plan_ with pieces cut at slab boundaries (split_plan)
  std::vector<std::byte*>& src_;
  std::vector<std::byte*>& dst_;
  const vps::ElemBytes& eb_;
  comm::Transport& t_;
  StateAllocator& alloc_;
  const TransitionOptions& opt_;
  const PieceGeometry g_;
  const DirectRuns direct_;

  TransitionStats stats_;
  ScheduleTrace* trace_ = nullptr;  // set during the dry run that records the schedule
  LinkClasses links_;
  std::array<int, 2> depth_{2, 0};  // rounds in flight per class (TransitionOptions::rounds_in_flight)
  std::size_t cap_ = 0;
  BufferMemory mem_;                     // sizes, page-wise buffers, granules
  std::vector<std::uint64_t> src_left_;  // per source buffer: bytes to send or keep
  std::uint64_t src_total_ = 0, dst_total_ = 0;
  Adoptions adoptions_;
  KeepRemaps remaps_;
  std::size_t tensors_ = 0;
  std::vector<std::int64_t> slab_rows_;  // per tensor
  std::vector<std::size_t> key_base_;    // first key of each (group, kind, tensor)
  std::vector<int> wave_of_key_;
  WaveStats wave_stats_;  // all ranks' (load, net) per key (agree_waves)
  int nwaves_ = 0;
  std::vector<std::vector<std::uint32_t>> keeps_;  // per wave: indices into wp_.keep
  WaveWork work_;
  std::vector<Round> rounds_;                                         // this rank's exchange sequence (build_rounds)
  std::array<std::size_t, 2> send_stage_size_{}, recv_stage_size_{};  // per link class
  bool commit_ahead_ = false;                                         // the runs from now on commit receives ahead
  std::uint64_t ahead_bytes_ = 0, ahead_peak_ = 0;                    // of the last run (MemoryLedger::begin_receives)
};

}  // namespace

TransitionStats sequential_stats(TransitionStats a, const TransitionStats& b) {
  a.seconds += b.seconds;
  a.bytes_sent += b.bytes_sent;
  a.bytes_received += b.bytes_received;
  a.bytes_kept += b.bytes_kept;
  a.skipped_bytes_sent += b.skipped_bytes_sent;
  a.skipped_bytes_received += b.skipped_bytes_received;
  a.skipped_bytes_kept += b.skipped_bytes_kept;
  a.zeroed_bytes += b.zeroed_bytes;
  a.zeroed_in_place_bytes += b.zeroed_in_place_bytes;
  a.unset_bytes += b.unset_bytes;
  a.kept_zero_copy_bytes += b.kept_zero_copy_bytes;
  a.kept_remapped_bytes += b.kept_remapped_bytes;
  a.messages += b.messages;
  a.zero_copy_sends += b.zero_copy_sends;
  a.sends_ahead += b.sends_ahead;
  a.zero_copy_recvs += b.zero_copy_recvs;
  a.bytes_sent_direct += b.bytes_sent_direct;
  a.bytes_received_direct += b.bytes_received_direct;
  a.committed_ahead_bytes += b.committed_ahead_bytes;
  a.commit_calls += b.commit_calls;
  a.staging_bytes = std::max(a.staging_bytes, b.staging_bytes);
  a.waves += b.waves;
  a.link_classes = std::max(a.link_classes, b.link_classes);
  a.rounds_in_flight = std::max(a.rounds_in_flight, b.rounds_in_flight);
  a.overlapped_rounds += b.overlapped_rounds;
  a.pagewise_buffers += b.pagewise_buffers;
  a.dst_bytes = b.dst_bytes;
  a.peak_bytes = std::max(a.peak_bytes, b.peak_bytes);
  a.predicted_peak_bytes = std::max(a.predicted_peak_bytes, b.predicted_peak_bytes);
  a.pack_seconds += b.pack_seconds;
  a.unpack_seconds += b.unpack_seconds;
  a.keep_seconds += b.keep_seconds;
  a.wait_seconds += b.wait_seconds;
  a.alloc_seconds += b.alloc_seconds;
  a.agree_seconds += b.agree_seconds;
  a.dry_seconds += b.dry_seconds;
  a.system_seconds += b.system_seconds;
  a.page_faults += b.page_faults;
  return a;
}

KeepPath parse_keep_path(const std::string& text) {
  if (text == "auto") return KeepPath::kAuto;
  if (text == "remap") return KeepPath::kRemap;
  if (text == "copy") return KeepPath::kCopy;
  DT_INPUT_ERROR("--keep-path '", text, "' is not valid; valid: auto, remap, copy");
}

LinkOverlap parse_link_overlap(const std::string& text) {
  if (text == "auto") return LinkOverlap::kAuto;
  if (text == "off") return LinkOverlap::kOff;
  if (text == "on") return LinkOverlap::kOn;
  DT_INPUT_ERROR("--overlap-links '", text, "' is not valid; valid: auto, on, off");
}

bool broadcast_preferred(int receivers, int off_node, std::uint64_t bytes) {
  return receivers >= 2 && off_node >= 2 && bytes >= (1u << 20);
}

TransitionStats run_transition(const plan::RankPlan& plan, const vps::RankLayout& src_layout,
                               std::vector<std::byte*>& src, const vps::RankLayout& dst_layout,
                               std::vector<std::byte*>& dst, const vps::ElemBytes& elem_bytes,
                               comm::Transport& transport, StateAllocator& alloc, const TransitionOptions& options) {
  Engine engine(plan, src_layout, src, dst_layout, dst, elem_bytes, transport, alloc, options);
  return engine.run();
}

}  // namespace dynatrain::exec
