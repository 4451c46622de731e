// Implementation notes (the contract is in engine.h, the guarantees in exec/README.md).
//
// run_transition = prepare (validate, count per-buffer outgoing bytes)
//                + agree (all_gather_bytes: tensor count, slab rows, per-key load and growth)
//                + split the plan at slab boundaries, choose page-wise buffers
//                + for each candidate order: cut waves and chunks, execute(dry)
//                + agree on the order (one all_gather_bytes), execute(dry), execute(real).
// execute() is one function for the dry run and the real run, so the predicted peak is the
// accounted peak by construction: the dry run performs the same allocate / release / commit /
// decommit events in the same order, only without touching data or the transport.
#include "exec/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>

#include "common/error.h"
#include "exec/box_copy.h"
#include "exec/chunking.h"
#include "exec/wave_agreement.h"
#include "common/clock.h"

namespace dynatrain::exec {
namespace {

constexpr int kTag = 1495;
constexpr std::size_t kMinBudget = 256;

// Whole pages of a kept run moved by StateAllocator::move_pages: byte offsets into the source
// and the destination buffer (multiples of kPageBytes) and the length.
struct Remap {
  std::uint64_t src_at = 0, dst_at = 0, bytes = 0;
};


class Engine {
 public:
  Engine(const plan::RankPlan& plan, const vps::RankLayout& sl, std::vector<std::byte*>& src,
         const vps::RankLayout& dl, std::vector<std::byte*>& dst,
         const vps::ElemBytes& eb, comm::Transport& t, StateAllocator& alloc,
         const TransitionOptions& opt)
      : plan_(plan), sl_(sl), src_(src), dl_(dl), dst_(dst), eb_(eb), t_(t), alloc_(alloc),
        opt_(opt) {}

  TransitionStats run() {
    const auto t0 = std::chrono::steady_clock::now();
    choose_link_classes();
    validate();
    detect_fanout();
    find_adoptions();
    agree_slabs();
    split_plan();
    agree_waves();
    choose_pagewise();
    find_remaps();
    stats_.agree_seconds = seconds_since(t0);
    const std::uint64_t floor = std::max(src_total_, dst_total_);
    WaveOrder order = opt_.order;
    if (order == WaveOrder::kAuto) {
      // Dry-run every candidate order; all ranks take the one whose worst rank overshoots
      // max(source, destination) the least (the earliest on a tie).
      constexpr WaveOrder kCandidates[3] = {WaveOrder::kAscending, WaveOrder::kDescending,
                                            WaveOrder::kBalanced};
      std::vector<double> mine(3);
      for (int i = 0; i < 3; ++i) {
        cut_waves(kCandidates[i]);
        mine[i] = static_cast<double>(execute(true)) - static_cast<double>(floor);
      }
      const std::vector<double> worst = max_over_ranks(kAgreeOrder, mine);
      double best = 0;
      for (int i = 0; i < 3; ++i)
        if (i == 0 || worst[i] < best) best = worst[i], order = kCandidates[i];
    }
    cut_waves(order);
    trace_ = opt_.trace;
    stats_.predicted_peak_bytes = execute(true);
    trace_ = nullptr;
    stats_.dry_seconds = seconds_since(t0) - stats_.agree_seconds;
    stats_.peak_bytes = opt_.dry_only ? stats_.predicted_peak_bytes : execute(false);
    const bool desc = order == WaveOrder::kDescending;
    stats_.wave_order = order == WaveOrder::kAscending ? "ascending"
                        : desc                         ? "descending"
                                                       : "balanced";
    stats_.descending = desc;
    stats_.waves = static_cast<std::uint64_t>(nwaves_);
    stats_.link_classes = static_cast<std::uint64_t>(classes_);
    stats_.rounds_in_flight = static_cast<std::uint64_t>(depth_[classes_ - 1]);
    stats_.chunk_bytes = cap_;
    stats_.granule_bytes = granule_;
    stats_.pagewise_buffers = pagewise_count_;
    stats_.src_bytes = src_total_;
    stats_.dst_bytes = dst_total_;
    stats_.seconds = seconds_since(t0);
    return stats_;
  }

 private:
  bool zeroed(vps::StateKind k) const { return (opt_.zeroed_kinds >> static_cast<int>(k)) & 1u; }
  std::size_t elem(vps::StateKind k) const { return static_cast<std::size_t>(eb_[static_cast<int>(k)]); }
  std::uint64_t piece_bytes(const plan::Piece& p) const {
    return static_cast<std::uint64_t>(p.box.numel()) * elem(p.kind);
  }
  const vps::Segment& src_seg(const plan::Piece& p) const {
    return sl_.buffers[p.src_buffer].segments[p.src_segment];
  }
  const vps::Segment& dst_seg(const plan::Piece& p) const {
    return dl_.buffers[p.dst_buffer].segments[p.dst_segment];
  }

  void check_piece(const plan::Piece& p, bool local_src, bool local_dst) const {
    const int me = t_.rank();
    if (local_src) {
      DT_CHECK(p.src_rank == me, "piece from rank ", p.src_rank, " in the sends of rank ", me);
      DT_CHECK(p.src_buffer < sl_.buffers.size() &&
                   p.src_segment < sl_.buffers[p.src_buffer].segments.size(),
               "piece names source buffer ", p.src_buffer, " segment ", p.src_segment);
      DT_CHECK(sl_.buffers[p.src_buffer].kind == p.kind, "piece kind differs from source buffer");
      DT_CHECK(src_seg(p).tensor == p.tensor && src_seg(p).box.contains(p.box),
               "piece box ", p.box.str(), " outside source segment ", src_seg(p).box.str());
    }
    if (local_dst) {
      DT_CHECK(p.dst_rank == me, "piece to rank ", p.dst_rank, " in the receives of rank ", me);
      DT_CHECK(p.dst_buffer < dl_.buffers.size() &&
                   p.dst_segment < dl_.buffers[p.dst_buffer].segments.size(),
               "piece names destination buffer ", p.dst_buffer, " segment ", p.dst_segment);
      DT_CHECK(dl_.buffers[p.dst_buffer].kind == p.kind, "piece kind differs from destination buffer");
      DT_CHECK(dst_seg(p).tensor == p.tensor && dst_seg(p).box.contains(p.box),
               "piece box ", p.box.str(), " outside destination segment ", dst_seg(p).box.str());
    }
  }

  // ---- link classes ----
  // Nodes of the ranks (Transport::node_of, or TransitionOptions::topology when forced on a
  // single node) and whether the schedule runs one pipeline per class (LinkOverlap). Every rank
  // computes the same answer from the same global facts.
  void choose_link_classes() {
    const int W = t_.size();
    node_.assign(static_cast<std::size_t>(W), 0);
    classes_ = 1;
    if (opt_.overlap_links == LinkOverlap::kOff) return;
    auto spans = [&] { return std::any_of(node_.begin(), node_.end(), [&](int n) { return n != node_[0]; }); };
    for (int r = 0; r < W; ++r) node_[r] = t_.node_of(r);
    if (!spans() && opt_.overlap_links == LinkOverlap::kOn)
      for (int r = 0; r < W; ++r) node_[r] = opt_.topology.node_of(r);
    if (!spans()) {
      node_.assign(static_cast<std::size_t>(W), 0);
      return;
    }
    classes_ = 2;
    std::map<int, int> per_node;
    int most = 1;
    for (int n : node_) most = std::max(most, ++per_node[n]);
    node_steps_ = 1;
    while (node_steps_ < most) node_steps_ <<= 1;
  }
  // 0: the pair shares a node; 1: it talks over the network (always 0 with one class).
  int link_class(int peer) const { return node_[peer] != node_[t_.rank()] ? 1 : 0; }

  void validate() {
    const int W = t_.size();
    DT_CHECK_EQ(plan_.rank, t_.rank());
    DT_CHECK_EQ(src_.size(), sl_.buffers.size());
    if (opt_.mem_budget < kMinBudget)
      DT_INPUT_ERROR("memory budget ", opt_.mem_budget, " bytes is too small; use at least ",
                     kMinBudget, " bytes");
    // Staging: depth_[c] slots per direction for link class c: 2 * (depth_[0] + depth_[1])
    // slots of cap <= budget / 2.
    if (opt_.rounds_in_flight < 0 || opt_.rounds_in_flight > kMaxRoundsInFlight)
      DT_INPUT_ERROR("rounds in flight ", opt_.rounds_in_flight, " is not valid; give 0 (auto: ",
                     kAutoRoundsInFlight[0], " on one node, ", kAutoRoundsInFlight[1],
                     " per link class across nodes) or 1 to ", kMaxRoundsInFlight);
    const int n = opt_.rounds_in_flight;
    depth_[0] = n > 0 ? n : kAutoRoundsInFlight[0];
    depth_[1] = classes_ == 1 ? 0 : n > 0 ? n : kAutoRoundsInFlight[1];
    cap_ = chunk_capacity(opt_.mem_budget, depth_[0] + depth_[1]);
    src_size_.resize(sl_.buffers.size());
    src_left_.assign(sl_.buffers.size(), 0);
    for (std::size_t i = 0; i < sl_.buffers.size(); ++i) {
      src_size_[i] = static_cast<std::uint64_t>(sl_.buffers[i].numel) * elem(sl_.buffers[i].kind);
      DT_CHECK(src_size_[i] == 0 || src_[i] != nullptr || opt_.dry_only, "source buffer ", i, " has no data");
      src_total_ += src_size_[i];
    }
    dst_size_.resize(dl_.buffers.size());
    for (std::size_t j = 0; j < dl_.buffers.size(); ++j) {
      dst_size_[j] = static_cast<std::uint64_t>(dl_.buffers[j].numel) * elem(dl_.buffers[j].kind);
      dst_total_ += dst_size_[j];
    }
    dst_.assign(dl_.buffers.size(), nullptr);
    for (const auto& p : plan_.keep) {
      check_piece(p, true, true);
      if (zeroed(p.kind)) stats_.skipped_bytes_kept += piece_bytes(p);
      else src_left_[p.src_buffer] += piece_bytes(p);
    }
    for (const auto& [peer, pieces] : plan_.send) {
      DT_CHECK(peer >= 0 && peer < W && peer != t_.rank(), "send peer ", peer, " of ", W);
      for (const auto& p : pieces) {
        check_piece(p, true, false);
        DT_CHECK_EQ(p.dst_rank, peer);
        if (zeroed(p.kind)) stats_.skipped_bytes_sent += piece_bytes(p);
        else src_left_[p.src_buffer] += piece_bytes(p);
      }
    }
    for (const auto& [peer, pieces] : plan_.recv) {
      DT_CHECK(peer >= 0 && peer < W && peer != t_.rank(), "receive peer ", peer, " of ", W);
      for (const auto& p : pieces) {
        check_piece(p, false, true);
        DT_CHECK_EQ(p.src_rank, peer);
        if (zeroed(p.kind)) stats_.skipped_bytes_received += piece_bytes(p);
      }
    }
    for (std::size_t j = 0; j < dl_.buffers.size(); ++j)
      if (zeroed(dl_.buffers[j].kind)) stats_.zeroed_bytes += dst_size_[j];
  }

  void detect_fanout() {
    std::map<std::tuple<std::uint32_t, int, vps::Box>, std::vector<int>> groups;
    for (const auto& [peer, pieces] : plan_.send)
      for (const auto& p : pieces)
        groups[{p.tensor, static_cast<int>(p.kind), p.box}].push_back(peer);
    const int my_node = opt_.topology.node_of(t_.rank());
    for (const auto& [key, peers] : groups) {
      if (peers.size() < 2) continue;
      const std::uint64_t bytes =
          static_cast<std::uint64_t>(std::get<2>(key).numel()) *
          static_cast<std::uint64_t>(eb_[std::get<1>(key)]);
      stats_.fanout_bytes += bytes * (peers.size() - 1);
      int off_node = 0;
      for (int q : peers) off_node += opt_.topology.node_of(q) != my_node;
      if (broadcast_preferred(static_cast<int>(peers.size()), off_node, bytes))
        stats_.broadcast_preferred_bytes += bytes * (peers.size() - 1);
    }
    stats_.path = "p2p";
    if (stats_.broadcast_preferred_bytes > 0)
      stats_.path = "p2p (the cost model prefers a broadcast for " +
                    std::to_string(stats_.broadcast_preferred_bytes) +
                    " fan-out bytes; the broadcast path is not implemented)";
  }

  // Zero-copy keeps: destination buffer j adopts source buffer i as it is when the allocator
  // allows it, both hold the identical segments at identical offsets (same kind and size), the
  // plan keeps every segment byte of j from i, and nothing else reads i.
  void find_adoptions() {
    adopted_src_.assign(sl_.buffers.size(), -1);
    adopted_dst_.assign(dl_.buffers.size(), -1);
    adopted_bytes_.assign(sl_.buffers.size(), 0);
    if (!alloc_.can_adopt()) return;
    if (opt_.in_place) {  // every buffer stays (TransitionOptions::in_place); sends still read it
      DT_CHECK_EQ(sl_.buffers.size(), dl_.buffers.size());
      for (const auto& p : plan_.keep) {
        DT_CHECK(p.src_buffer == p.dst_buffer && p.src_segment == p.dst_segment, "in-place keep moves ",
                 p.box.str());
        if (zeroed(p.kind)) continue;
        adopted_bytes_[p.src_buffer] += piece_bytes(p);
        src_left_[p.src_buffer] -= piece_bytes(p);
      }
      for (std::size_t i = 0; i < sl_.buffers.size(); ++i) {
        adopted_src_[i] = adopted_dst_[i] = static_cast<int>(i);
        stats_.kept_zero_copy_bytes += adopted_bytes_[i];
      }
      return;
    }
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> kept;
    for (const auto& p : plan_.keep)
      if (!zeroed(p.kind) && src_seg(p).offset == dst_seg(p).offset && src_seg(p).box == dst_seg(p).box &&
          p.box == dst_seg(p).box)
        kept[{p.src_buffer, p.dst_buffer}] += piece_bytes(p);
    for (const auto& [ij, bytes] : kept) {
      const auto [i, j] = ij;
      const auto& a = sl_.buffers[i];
      const auto& b = dl_.buffers[j];
      if (adopted_src_[i] >= 0 || adopted_dst_[j] >= 0 || a.kind != b.kind || a.numel != b.numel ||
          a.segments.size() != b.segments.size() || src_left_[i] != bytes)
        continue;
      std::uint64_t seg_bytes = 0;
      bool same = true;
      for (std::size_t k = 0; k < a.segments.size() && same; ++k) {
        const auto& x = a.segments[k];
        const auto& y = b.segments[k];
        same = x.tensor == y.tensor && x.box == y.box && x.offset == y.offset;
        seg_bytes += static_cast<std::uint64_t>(y.box.numel()) * elem(b.kind);
      }
      if (!same || seg_bytes != bytes) continue;
      adopted_src_[i] = static_cast<int>(j);
      adopted_bytes_[i] = bytes;
      adopted_dst_[j] = static_cast<int>(i);
      src_left_[i] = 0;
      stats_.kept_zero_copy_bytes += bytes;
    }
  }
  bool adopted(const plan::Piece& p) const { return adopted_src_[p.src_buffer] == static_cast<int>(p.dst_buffer); }

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
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = std::max(out[i], all[static_cast<std::size_t>(r) * out.size() + i]);
    return out;
  }

  // Slabs: every tensor is cut along dim 0 into slabs of `slab_rows_[t]` rows, so that one
  // slab of the whole tensor holds at most mem_budget / 16 bytes. A dim-0 slab of any box is
  // one contiguous run of its row-major storage, so a slab's bytes sit together in every
  // buffer. All ranks agree on the rows (from the largest row length any rank holds).
  void agree_slabs() {
    std::uint64_t local_t = 0;
    auto see_t = [&](const plan::Piece& p) { local_t = std::max<std::uint64_t>(local_t, p.tensor + 1); };
    for (const auto& p : plan_.keep) see_t(p);
    for (const auto& [q, v] : plan_.send) for (const auto& p : v) see_t(p);
    for (const auto& [q, v] : plan_.recv) for (const auto& p : v) see_t(p);
    tensors_ = static_cast<std::size_t>(max_over_ranks(kAgreeTensors, std::vector<std::uint64_t>{local_t})[0]);
    // Per tensor: (rows = largest dim-0 end, row = largest row length in elements).
    std::vector<std::uint64_t> mine(2 * tensors_, 0);
    auto see = [&](const plan::Piece& p) {
      std::uint64_t row = 1;
      for (int d = 1; d < p.box.ndim; ++d) row *= static_cast<std::uint64_t>(p.box.extent(d));
      auto& rows = mine[2 * p.tensor];
      rows = std::max(rows, static_cast<std::uint64_t>(p.box.ndim > 0 ? p.box.hi[0] : 1));
      mine[2 * p.tensor + 1] = std::max(mine[2 * p.tensor + 1], row);
    };
    for (const auto& p : plan_.keep) see(p);
    for (const auto& [q, v] : plan_.send) for (const auto& p : v) see(p);
    for (const auto& [q, v] : plan_.recv) for (const auto& p : v) see(p);
    const std::vector<std::uint64_t> most = max_over_ranks(kAgreeSlabs, mine);
    const std::uint64_t slab_elems = std::max<std::uint64_t>(1, opt_.mem_budget / 16 / 4);
    slab_rows_.assign(tensors_, 1);
    key_base_.assign(2 * vps::kNumStateKinds * tensors_ + 1, 0);
    std::vector<std::uint64_t> slabs(tensors_, 1);
    for (std::size_t t = 0; t < tensors_; ++t) {
      const std::uint64_t rows = most[2 * t], row = std::max<std::uint64_t>(1, most[2 * t + 1]);
      slab_rows_[t] = static_cast<std::int64_t>(std::max<std::uint64_t>(1, slab_elems / row));
      slabs[t] = std::max<std::uint64_t>(1, (rows + slab_rows_[t] - 1) / slab_rows_[t]);
    }
    // Key space: (expert group, kind, tensor, slab) in that order, densely numbered.
    for (std::size_t g = 0, i = 0; g < 2; ++g)
      for (int k = 0; k < vps::kNumStateKinds; ++k)
        for (std::size_t t = 0; t < tensors_; ++t, ++i) key_base_[i + 1] = key_base_[i] + slabs[t];
  }

  // The plan with every piece cut at slab boundaries (in place, so both sides of a pair cut
  // their identical lists identically and still agree on the order).
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
      if (!adopted(p)) keeps.push_back(p);
    split(keeps, wp_.keep);
    for (const auto& [peer, v] : plan_.send) split(v, wp_.send[peer]);
    for (const auto& [peer, v] : plan_.recv) split(v, wp_.recv[peer]);
  }

  std::size_t key_of(const plan::Piece& p, bool expert_group) const {
    const std::size_t base = (static_cast<std::size_t>(expert_group) * vps::kNumStateKinds +
                              static_cast<std::size_t>(p.kind)) * tensors_ + p.tensor;
    const std::int64_t slab = p.box.ndim > 0 ? p.box.lo[0] / slab_rows_[p.tensor] : 0;
    return key_base_[base] + static_cast<std::size_t>(slab);
  }
  std::size_t src_key(const plan::Piece& p) const { return key_of(p, sl_.buffers[p.src_buffer].expert_group); }
  std::size_t dst_key(const plan::Piece& p) const { return key_of(p, dl_.buffers[p.dst_buffer].expert_group); }

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
    for (const auto& p : wp_.keep) add(dst_key(p), piece_bytes(p), piece_bytes(p));
    for (const auto& [q, v] : wp_.send) for (const auto& p : v) add(src_key(p), piece_bytes(p), 0);
    for (const auto& [q, v] : wp_.recv) for (const auto& p : v) add(dst_key(p), 0, piece_bytes(p));
    if (opt_.shared_waves) {
      opt_.shared_waves->contribute(t_.rank(), t_.size(), mine);
      t_.barrier();  // every rank's stats are in
    } else {
      wave_stats_ = {t_.size(), nkeys, comm::all_gather_values(t_, mine)};
    }
  }

  // The waves of `order` (exec::cut_waves), then the chunks of every wave.
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

  // Page-wise buffers: those larger than mem_budget / 16 when the allocator can give back parts
  // of them. Their memory is accounted per granule (a power of two of pages, about
  // mem_budget / 32): a source granule is given back once every byte in it has been read, a
  // destination granule made live when first written.
  void choose_pagewise() {
    std::size_t g = 64 << 10;
    while (g * 2 <= opt_.mem_budget / 32 && g < (2u << 20)) g *= 2;
    granule_ = g;
    const std::uint64_t min_bytes = std::max<std::uint64_t>(opt_.mem_budget / 16 + 1, alloc_.pagewise_min_bytes());
    src_pw_.assign(src_size_.size(), 0);
    dst_pw_.assign(dst_size_.size(), 0);
    for (std::size_t b = 0; b < src_size_.size(); ++b)
      src_pw_[b] = src_size_[b] >= min_bytes && !(opt_.in_place && adopted_src_[b] >= 0);  // in place: never drained
    for (std::size_t b = 0; b < dst_size_.size(); ++b) dst_pw_[b] = dst_size_[b] >= min_bytes;
    pagewise_count_ = static_cast<std::uint64_t>(std::count(src_pw_.begin(), src_pw_.end(), 1) +
                                                 std::count(dst_pw_.begin(), dst_pw_.end(), 1));
    // Unread bytes per granule of each page-wise source buffer, over every read of the plan.
    unread_init_.assign(src_size_.size(), {});
    for (std::size_t b = 0; b < src_size_.size(); ++b)
      if (src_pw_[b]) unread_init_[b].assign(granules(src_size_[b]), 0);
    auto count_reads = [&](const plan::Piece& p) {
      if (!src_pw_[p.src_buffer]) return;
      auto& u = unread_init_[p.src_buffer];
      for_each_byte_run(p, 0, p.box.numel(), true, [&](std::uint64_t at, std::uint64_t n) {
        for_each_granule(at, n, [&](std::size_t gi, std::uint64_t part) { u[gi] += part; });
      });
    };
    for (const auto& p : wp_.keep) count_reads(p);
    for (const auto& [q, v] : wp_.send) for (const auto& p : v) count_reads(p);
  }
  // Remapped keeps: a kept piece that is one contiguous run in its source and its destination
  // buffer, both page-mapped blocks (>= pagewise_min_bytes) at offsets congruent modulo a page,
  // has its whole pages moved (StateAllocator::move_pages) instead of copied; the partial pages
  // at its ends are copied. A source page qualifies only when this keep is its only reader
  // (moving takes it away). Memory is accounted exactly as for a copy (the destination granule
  // or buffer when first written, the source when drained), so the dry run does not change; the
  // destination pages a remap fills are never committed (commit_range skips them).
  void find_remaps() {
    keep_remaps_.assign(wp_.keep.size(), {});
    dst_remapped_.assign(dst_size_.size(), {});
    if (!alloc_.can_move_pages()) return;
    const std::uint64_t min_bytes = alloc_.pagewise_min_bytes();
    struct Candidate {
      std::uint32_t keep = 0;
      std::uint64_t src_at = 0, dst_at = 0, bytes = 0;  // the piece's contiguous byte runs
    };
    std::vector<Candidate> cands;
    std::vector<char> read_counted(src_size_.size(), 0);
    for (std::uint32_t i = 0; i < wp_.keep.size(); ++i) {
      const plan::Piece& p = wp_.keep[i];
      if (src_size_[p.src_buffer] < min_bytes || dst_size_[p.dst_buffer] < min_bytes) continue;
      const std::int64_t n = p.box.numel();
      const std::int64_t so = contiguous_offset(p.box, 0, n, src_seg(p).box);
      const std::int64_t dof = contiguous_offset(p.box, 0, n, dst_seg(p).box);
      if (so < 0 || dof < 0) continue;
      const std::uint64_t e = elem(p.kind);
      const Candidate c{i, static_cast<std::uint64_t>(src_seg(p).offset + so) * e,
                        static_cast<std::uint64_t>(dst_seg(p).offset + dof) * e, static_cast<std::uint64_t>(n) * e};
      if (c.src_at % kPageBytes != c.dst_at % kPageBytes || c.bytes < kPageBytes) continue;
      cands.push_back(c);
      read_counted[p.src_buffer] = 1;
    }
    if (cands.empty()) return;
    // Bytes read from each page of the candidates' source buffers, by every keep and send.
    std::vector<std::vector<std::uint32_t>> reads(src_size_.size());
    for (std::size_t b = 0; b < src_size_.size(); ++b)
      if (read_counted[b]) reads[b].assign((src_size_[b] + kPageBytes - 1) / kPageBytes, 0);
    auto count = [&](const plan::Piece& p) {
      auto& r = reads[p.src_buffer];
      if (r.empty()) return;
      for_each_byte_run(p, 0, p.box.numel(), true, [&](std::uint64_t at, std::uint64_t n) {
        while (n > 0) {
          const std::uint64_t part = std::min<std::uint64_t>(n, kPageBytes - at % kPageBytes);
          r[at / kPageBytes] += static_cast<std::uint32_t>(part);
          at += part;
          n -= part;
        }
      });
    };
    for (const auto& p : wp_.keep) count(p);
    for (const auto& [q, v] : wp_.send) for (const auto& p : v) count(p);
    for (const Candidate& c : cands) {
      const auto& r = reads[wp_.keep[c.keep].src_buffer];
      const std::uint64_t first = (c.src_at + kPageBytes - 1) / kPageBytes, last = (c.src_at + c.bytes) / kPageBytes;
      for (std::uint64_t pg = first; pg < last;) {
        if (r[pg] != kPageBytes) {
          ++pg;
          continue;
        }
        std::uint64_t end = pg;
        while (end < last && r[end] == kPageBytes) ++end;
        const std::uint64_t at = pg * kPageBytes, bytes = (end - pg) * kPageBytes;
        const std::uint64_t dst_at = at - c.src_at + c.dst_at;
        keep_remaps_[c.keep].push_back({at, dst_at, bytes});
        dst_remapped_[wp_.keep[c.keep].dst_buffer].push_back({dst_at, bytes});
        pg = end;
      }
    }
    for (auto& v : dst_remapped_) std::sort(v.begin(), v.end());
  }
  std::size_t granules(std::uint64_t bytes) const { return static_cast<std::size_t>((bytes + granule_ - 1) / granule_); }
  std::uint64_t granule_size(std::uint64_t buffer_bytes, std::size_t gi) const {
    return std::min<std::uint64_t>(granule_, buffer_bytes - gi * granule_);
  }
  template <typename Fn>
  void for_each_granule(std::uint64_t at, std::uint64_t n, Fn&& fn) const {
    while (n > 0) {
      const std::size_t gi = static_cast<std::size_t>(at / granule_);
      const std::uint64_t part = std::min<std::uint64_t>(n, (gi + 1) * granule_ - at);
      fn(gi, part);
      at += part;
      n -= part;
    }
  }
  // Byte runs (offset into the buffer, length) of elements [begin, end) of a piece, in its
  // source (`source`) or destination buffer.
  template <typename Fn>
  void for_each_byte_run(const plan::Piece& p, std::int64_t begin, std::int64_t end, bool source, Fn&& fn) const {
    const vps::Segment& s = source ? src_seg(p) : dst_seg(p);
    const std::uint64_t e = elem(p.kind);
    for_each_run(p.box, begin, end, s.box, [&](std::int64_t off, std::int64_t count) {
      fn(static_cast<std::uint64_t>(s.offset + off) * e, static_cast<std::uint64_t>(count) * e);
    });
  }

  void build_chunks() {
    send_stage_size_.fill(0);
    recv_stage_size_.fill(0);
    keeps_.assign(static_cast<std::size_t>(nwaves_), {});
    for (std::uint32_t i = 0; i < wp_.keep.size(); ++i)
      keeps_[wave_of_key_[dst_key(wp_.keep[i])]].push_back(i);
    work_ = cut_wave_chunks(wp_, nwaves_, eb_, cap_, [&](const plan::Piece& p, bool source) {
      return wave_of_key_[source ? src_key(p) : dst_key(p)];
    });
    // This rank's sequence of rounds: waves in order, XOR steps, rounds of each pair.
    rounds_.clear();
    const int W = t_.size(), me = t_.rank();
    int steps = 1;
    while (steps < W) steps <<= 1;
    for (int w = 0; w < nwaves_; ++w)
      for (int s = 1; s < steps; ++s) {
        const int peer = me ^ s;
        auto it = peer < W ? work_[w].find(peer) : work_[w].end();
        if (it == work_[w].end()) continue;
        const std::size_t n = std::max(it->second.send.size(), it->second.recv.size());
        for (std::size_t r = 0; r < n; ++r) rounds_.push_back({w, peer, r, link_class(peer), s, n});
      }
    if (classes_ == 2) merge_link_classes(steps);
    // Staging: only chunks that cannot go zero-copy need it.
    for (auto& wave : work_) {
      for (auto& [peer, pw] : wave) {
        auto& ss = send_stage_size_[link_class(peer)];
        auto& rs = recv_stage_size_[link_class(peer)];
        for (auto& c : pw.send)
          if (!(c.direct = chunk_direct(peer, c, true))) ss = std::max(ss, c.bytes);
        for (auto& c : pw.recv)
          if (!(c.direct = chunk_direct(peer, c, false))) rs = std::max(rs, c.bytes);
      }
    }
  }

  // Two link classes: the rounds of a wave are ordered by a key that both ranks of a pair
  // compute alike, from the wave, the XOR step s, the pair's class, the round r and the pair's
  // round count n, so the rank's sequence still follows one global order of all rounds
  // (deadlock freedom, execute()). Within a wave each class's steps are laid evenly over [0, 1)
  // — intra-node steps s in [1, node_steps_), inter-node steps s in [node_steps_, steps) on
  // node-contiguous ranks — step s taking [s - lo, s - lo + 1) / (hi - lo) and its round r the
  // point (r + 1/2) / n of that interval; the rounds are merged by that fraction (ties:
  // intra-node first, then step, then round). So a rank's intra-node and inter-node rounds
  // alternate in proportion to their numbers, and both classes end together. Pairs outside
  // those ranges (nodes not contiguous) clamp to [0, 1]: still one global order.
  void merge_link_classes(int steps) {
    auto fraction = [&](const Round& rd) {
      const double lo = rd.cls == 0 ? 1 : node_steps_, hi = rd.cls == 0 ? node_steps_ : steps;
      const double at = rd.step - lo + (static_cast<double>(rd.round) + 0.5) / static_cast<double>(rd.of);
      return hi > lo ? std::clamp(at / (hi - lo), 0.0, 1.0) : 0.0;
    };
    std::stable_sort(rounds_.begin(), rounds_.end(), [&](const Round& a, const Round& b) {
      if (a.wave != b.wave) return a.wave < b.wave;
      const double fa = fraction(a), fb = fraction(b);
      if (fa != fb) return fa < fb;
      return a.cls < b.cls;  // then step and round: the stable order they were built in
    });
  }

  // ---- direct (unpacked) transfers ----
  // A pair whose transport moves scattered messages straight from runs to runs
  // (Transport::runs_direct, symmetric) sends every chunk with isend_runs / irecv_runs: each
  // side passes the chunk's own byte runs in its buffers when they are few enough to beat
  // packing (chunk_direct), else one run of its staging slot (packed / unpacked as before).
  // Other pairs send plain messages, straight only for a chunk that is one contiguous run.
  bool pair_runs(int peer) const { return opt_.direct_runs && t_.runs_direct(peer); }
  // One byte run of a chunk in one of this rank's buffers (source or destination side).
  struct BufRun {
    std::uint32_t buffer = 0;
    std::uint64_t at = 0, bytes = 0;
  };
  // The chunk's byte runs on this side, in message order, adjacent runs of one buffer merged.
  std::vector<BufRun> chunk_runs(int peer, const Chunk& c, bool source) const {
    const auto& pieces = source ? wp_.send.at(peer) : wp_.recv.at(peer);
    std::vector<BufRun> out;
    for (const Range& rg : c.ranges) {
      const plan::Piece& p = pieces[rg.piece];
      const std::uint32_t b = source ? p.src_buffer : p.dst_buffer;
      for_each_byte_run(p, rg.begin, rg.end, source, [&](std::uint64_t at, std::uint64_t n) {
        if (!out.empty() && out.back().buffer == b && out.back().at + out.back().bytes == at)
          out.back().bytes += n;
        else
          out.push_back({b, at, n});
      });
    }
    return out;
  }
  // The rule: a chunk goes direct (no pack on the send side, no unpack on the receive side)
  // when its runs on that side average at least kMinDirectRunBytes (measured on this machine:
  // a runs-to-runs copy beats pack + copy + unpack from 2 KiB runs on; exec/README.md), or it
  // is one run. Without runs for the pair: only a chunk that is one contiguous run.
  static constexpr std::uint64_t kMinDirectRunBytes = 1024;
  bool chunk_direct(int peer, const Chunk& c, bool source) const {
    if (!pair_runs(peer)) return source ? send_direct(peer, c) != nullptr : recv_direct_offset(peer, c) >= 0;
    const std::size_t n = chunk_runs(peer, c, source).size();
    return n == 1 || n * kMinDirectRunBytes <= c.bytes;
  }
  // The chunk's runs as one comm::ByteRun list over `base` (the lowest buffer address used).
  std::pair<std::byte*, std::vector<comm::ByteRun>> comm_runs(int peer, const Chunk& c, bool source) const {
    const std::vector<BufRun> runs = chunk_runs(peer, c, source);
    auto addr = [&](const BufRun& r) {
      return reinterpret_cast<std::uintptr_t>(source ? src_[r.buffer] : dst_[r.buffer]) + r.at;
    };
    std::uintptr_t lo = UINTPTR_MAX;
    for (const BufRun& r : runs) lo = std::min(lo, addr(r));
    std::vector<comm::ByteRun> out;
    out.reserve(runs.size());
    for (const BufRun& r : runs) out.push_back({static_cast<std::size_t>(addr(r) - lo), static_cast<std::size_t>(r.bytes)});
    return {reinterpret_cast<std::byte*>(lo), std::move(out)};
  }

  // The source address of a chunk that is one contiguous run of one source segment (only the
  // offset matters in a dry run), else nullptr.
  const std::byte* send_direct(int peer, const Chunk& c) const {
    if (c.ranges.size() != 1) return nullptr;
    const Range& r = c.ranges[0];
    const plan::Piece& p = wp_.send.at(peer)[r.piece];
    const vps::Segment& s = src_seg(p);
    const std::int64_t off = contiguous_offset(p.box, r.begin, r.end, s.box);
    if (off < 0) return nullptr;
    static const std::byte kFake{};
    const std::byte* base = src_[p.src_buffer] ? src_[p.src_buffer] : &kFake;
    return base + static_cast<std::size_t>(s.offset + off) * elem(p.kind);
  }
  // Element offset into the destination buffer of a chunk that is one contiguous run there.
  std::int64_t recv_direct_offset(int peer, const Chunk& c) const {
    if (c.ranges.size() != 1) return -1;
    const Range& r = c.ranges[0];
    const plan::Piece& p = wp_.recv.at(peer)[r.piece];
    const vps::Segment& s = dst_seg(p);
    const std::int64_t off = contiguous_offset(p.box, r.begin, r.end, s.box);
    return off < 0 ? -1 : s.offset + off;
  }

  // ---- memory events (shared by the dry and the real run) ----
  // Live bytes are accounted per buffer: whole buffers, or granules of page-wise ones.
  struct Mem {
    std::vector<std::uint64_t> left;                // per source buffer: bytes still to read
    std::vector<std::vector<std::uint64_t>> unread; // page-wise source: per granule
    std::vector<std::uint64_t> src_live;            // live bytes of each source buffer
    std::vector<char> src_held;                     // not yet given back
    std::vector<char> dst_live;                     // allocated (whole) or reserved (page-wise)
    std::vector<std::vector<char>> committed;       // page-wise destination: per granule
    std::uint64_t live = 0, peak = 0;
  };
  void grow(Mem& m, std::uint64_t bytes) {
    m.live += bytes;
    m.peak = std::max(m.peak, m.live);
  }
  void release_src(Mem& m, bool dry, std::uint32_t b) {
    if (!m.src_held[b]) return;
    m.src_held[b] = 0;
    m.live -= m.src_live[b];
    m.src_live[b] = 0;
    if (!dry) {
      alloc_.release(src_[b], src_size_[b]);
      src_[b] = nullptr;
    }
  }
  void decommit_src(Mem& m, bool dry, std::uint32_t b, std::size_t gi) {
    const std::uint64_t n = granule_size(src_size_[b], gi);
    m.live -= n;
    m.src_live[b] -= n;
    if (!dry) alloc_.decommit(src_[b], gi * granule_, n);
  }
  // Elements [begin, end) of piece `p` have been read from its source buffer.
  void consume(Mem& m, bool dry, const plan::Piece& p, std::int64_t begin, std::int64_t end) {
    const std::uint32_t b = p.src_buffer;
    const std::uint64_t bytes = static_cast<std::uint64_t>(end - begin) * elem(p.kind);
    DT_CHECK(m.left[b] >= bytes, "source buffer ", b, " over-consumed");
    m.left[b] -= bytes;
    if (src_pw_[b]) {
      auto& u = m.unread[b];
      for_each_byte_run(p, begin, end, true, [&](std::uint64_t at, std::uint64_t n) {
        for_each_granule(at, n, [&](std::size_t gi, std::uint64_t part) {
          u[gi] -= part;
          if (u[gi] == 0) decommit_src(m, dry, b, gi);
        });
      });
    }
    if (m.left[b] == 0) release_src(m, dry, b);
  }
  void ensure_dst(Mem& m, bool dry, std::uint32_t b) {
    if (m.dst_live[b] || dst_size_[b] == 0) return;
    m.dst_live[b] = 1;
    if (dst_pw_[b]) {  // address space only; granules become live when written
      m.committed[b].assign(granules(dst_size_[b]), 0);
      if (!dry) dst_[b] = alloc_.reserve(dst_size_[b]);
      return;
    }
    grow(m, dst_size_[b]);
    if (trace_) trace_->fresh(dst_size_[b]);
    if (dry) return;
    const auto t0 = Clock::now();
    const auto& buf = dl_.buffers[b];
    if (dst_remapped_[b].empty()) {
      dst_[b] = alloc_.allocate_destination(buf, dst_size_[b]);
    } else {  // remapped keeps fill some of its pages: only the others are committed
      dst_[b] = alloc_.reserve(dst_size_[b]);
      commit_range(b, 0, dst_size_[b]);
    }
    zero_padding(b, 0, dst_size_[b]);
    stats_.alloc_seconds += seconds_since(t0);
  }
  // Zeroes the padding (bytes of no segment) of destination buffer b inside [lo, hi), so that
  // recycled memory leaks nothing.
  void zero_padding(std::uint32_t b, std::uint64_t lo, std::uint64_t hi) {
    const auto& buf = dl_.buffers[b];
    const std::uint64_t e = elem(buf.kind);
    auto zero = [&](std::uint64_t a, std::uint64_t z) {
      a = std::max(a, lo), z = std::min(z, hi);
      if (a < z) alloc_.zero(dst_[b] + a, z - a);
    };
    std::uint64_t at = 0;
    for (const auto& s : buf.segments) {
      const std::uint64_t from = static_cast<std::uint64_t>(s.offset) * e;
      if (from > at) zero(at, from);
      at = std::max(at, static_cast<std::uint64_t>(s.offset + s.box.numel()) * e);
    }
    zero(at, dst_size_[b]);
  }
  // Commits [lo, hi) of destination buffer b except the pages that remapped keeps fill.
  void commit_range(std::uint32_t b, std::uint64_t lo, std::uint64_t hi) {
    for (const auto& [at, bytes] : dst_remapped_[b]) {
      if (at >= hi) break;
      if (at + bytes <= lo) continue;
      if (at > lo) alloc_.commit(dst_[b], lo, at - lo);
      lo = std::max(lo, at + bytes);
    }
    if (lo < hi) alloc_.commit(dst_[b], lo, hi - lo);
  }
  void commit_dst(Mem& m, bool dry, std::uint32_t b, std::size_t gi) {
    if (m.committed[b][gi]) return;
    m.committed[b][gi] = 1;
    const std::uint64_t n = granule_size(dst_size_[b], gi);
    grow(m, n);
    if (trace_) trace_->fresh(n);
    if (dry) return;
    const auto t0 = Clock::now();
    commit_range(b, gi * granule_, gi * granule_ + n);
    zero_padding(b, gi * granule_, gi * granule_ + n);
    stats_.alloc_seconds += seconds_since(t0);
  }
  // Elements [begin, end) of piece `p` are about to be written into its destination buffer.
  void touch(Mem& m, bool dry, const plan::Piece& p, std::int64_t begin, std::int64_t end) {
    const std::uint32_t b = p.dst_buffer;
    ensure_dst(m, dry, b);
    if (!dst_pw_[b]) return;
    for_each_byte_run(p, begin, end, false, [&](std::uint64_t at, std::uint64_t n) {
      for_each_granule(at, n, [&](std::size_t gi, std::uint64_t) { commit_dst(m, dry, b, gi); });
    });
  }

  // One round of one pair in flight: the chunks, where they travel from / to, the requests.
  struct Flight {
    const Chunk* sc = nullptr;
    const Chunk* rc = nullptr;
    std::byte* rptr = nullptr;  // staging slot of a receive that is not direct
    bool s_direct = false, r_direct = false;
    std::unique_ptr<comm::Request> sreq, rreq;
  };

  void do_keeps(Mem& m, bool dry, int w) {
    for (std::uint32_t i : keeps_[w]) {
      const plan::Piece& p = wp_.keep[i];
      touch(m, dry, p, 0, p.box.numel());
      if (trace_) {  // the simulator costs copied bytes only: remapped pages move no byte
        std::uint64_t remapped = 0;
        for (const Remap& r : keep_remaps_[i]) remapped += r.bytes;
        trace_->keep(piece_bytes(p) - remapped);
      }
      if (!dry) {
        const auto t0 = Clock::now();
        const auto& s = src_seg(p);
        const auto& d = dst_seg(p);
        const std::size_t e = elem(p.kind);
        if (keep_remaps_[i].empty())
          copy_box(p.box, src_[p.src_buffer] + s.offset * e, s.box, dst_[p.dst_buffer] + d.offset * e,
                   d.box, e, alloc_);
        else
          remap_keep(p, keep_remaps_[i]);
        stats_.bytes_kept += piece_bytes(p);
        stats_.keep_seconds += seconds_since(t0);
      }
      consume(m, dry, p, 0, p.box.numel());
    }
  }

  // A contiguous keep with remapped pages: those are moved, the bytes around them copied.
  void remap_keep(const plan::Piece& p, const std::vector<Remap>& remaps) {
    const std::uint64_t e = elem(p.kind), n = piece_bytes(p);
    const std::uint64_t src_at = static_cast<std::uint64_t>(src_seg(p).offset + contiguous_offset(p.box, 0, p.box.numel(), src_seg(p).box)) * e;
    const std::uint64_t dst_at = static_cast<std::uint64_t>(dst_seg(p).offset + contiguous_offset(p.box, 0, p.box.numel(), dst_seg(p).box)) * e;
    std::byte* src = src_[p.src_buffer];
    std::byte* dst = dst_[p.dst_buffer];
    std::uint64_t at = src_at;  // source bytes [src_at, at) are done
    for (const Remap& r : remaps) {
      if (r.src_at > at) alloc_.copy(dst + (at - src_at + dst_at), src + at, r.src_at - at);
      alloc_.move_pages(src, r.src_at, dst, r.dst_at, r.bytes);
      stats_.kept_remapped_bytes += r.bytes;
      at = r.src_at + r.bytes;
    }
    if (src_at + n > at) alloc_.copy(dst + (at - src_at + dst_at), src + at, src_at + n - at);
  }

  // Posts the receive of round r: straight into the destination runs when the chunk goes
  // direct (chunk_direct), else into `stage`. A direct chunk's destination memory is made live
  // here, before the transport may write it.
  void post_recv(Mem& m, bool dry, int peer, const PeerWork& pw, std::size_t r, Flight& f, std::byte* stage) {
    f.rc = r < pw.recv.size() ? &pw.recv[r] : nullptr;
    f.rreq.reset();
    if (!f.rc) return;
    f.r_direct = f.rc->direct;
    f.rptr = stage;
    if (f.r_direct) {
      const auto& pieces = wp_.recv.at(peer);
      for (const Range& rg : f.rc->ranges) touch(m, dry, pieces[rg.piece], rg.begin, rg.end);
    }
    if (dry) return;
    if (pair_runs(peer)) {
      auto [base, runs] = f.r_direct ? comm_runs(peer, *f.rc, false)
                                     : std::pair{stage, std::vector<comm::ByteRun>{{0, f.rc->bytes}}};
      f.rreq = t_.irecv_runs(base, std::move(runs), peer, kTag);
      return;
    }
    if (f.r_direct) {
      const plan::Piece& p = wp_.recv.at(peer)[f.rc->ranges[0].piece];
      f.rptr = dst_[p.dst_buffer] + static_cast<std::size_t>(recv_direct_offset(peer, *f.rc)) * elem(p.kind);
    }
    f.rreq = t_.irecv(f.rptr, f.rc->bytes, peer, kTag);
  }

  // Packs round r into `stage` unless the chunk goes direct (chunk_direct), and posts the send.
  // A packed source range is consumed (and maybe given back) right after the pack; a direct
  // one after its send completed (finish_send).
  void post_send(Mem& m, bool dry, int peer, const PeerWork& pw, std::size_t r, Flight& f, std::byte* stage) {
    f.sc = r < pw.send.size() ? &pw.send[r] : nullptr;
    f.sreq.reset();
    if (!f.sc) return;
    f.s_direct = f.sc->direct;
    if (!f.s_direct) {
      const auto& pieces = wp_.send.at(peer);
      const auto t0 = Clock::now();
      std::byte* at = stage;
      for (const Range& rg : f.sc->ranges) {
        const plan::Piece& p = pieces[rg.piece];
        const std::size_t e = elem(p.kind);
        if (!dry)
          at += pack_range(p.box, rg.begin, rg.end, src_[p.src_buffer] + src_seg(p).offset * e,
                           src_seg(p).box, at, e, alloc_);
        consume(m, dry, p, rg.begin, rg.end);
      }
      if (!dry) stats_.pack_seconds += seconds_since(t0);
    }
    if (dry) return;
    if (pair_runs(peer)) {
      auto [base, runs] = f.s_direct ? comm_runs(peer, *f.sc, true)
                                     : std::pair{stage, std::vector<comm::ByteRun>{{0, f.sc->bytes}}};
      f.sreq = t_.isend_runs(base, std::move(runs), peer, kTag);
    } else {
      f.sreq = t_.isend(f.s_direct ? send_direct(peer, *f.sc) : stage, f.sc->bytes, peer, kTag);
    }
    ++stats_.messages;
    stats_.bytes_sent += f.sc->bytes;
    stats_.zero_copy_sends += f.s_direct;
    if (f.s_direct) stats_.bytes_sent_direct += f.sc->bytes;
  }

  void finish_recv(Mem& m, bool dry, int peer, Flight& f) {
    if (!f.rc) return;
    if (!dry) {
      const auto t0 = Clock::now();
      f.rreq->wait();
      stats_.wait_seconds += seconds_since(t0);
      stats_.bytes_received += f.rc->bytes;
      stats_.zero_copy_recvs += f.r_direct;
      if (f.r_direct) stats_.bytes_received_direct += f.rc->bytes;
    }
    if (f.r_direct) return;
    const auto& pieces = wp_.recv.at(peer);
    const auto t0 = Clock::now();
    const std::byte* at = f.rptr;
    for (const Range& rg : f.rc->ranges) {
      const plan::Piece& p = pieces[rg.piece];
      const std::size_t e = elem(p.kind);
      touch(m, dry, p, rg.begin, rg.end);
      if (!dry)
        at += unpack_range(p.box, rg.begin, rg.end, at, dst_[p.dst_buffer] + dst_seg(p).offset * e,
                           dst_seg(p).box, e, alloc_);
    }
    if (!dry) stats_.unpack_seconds += seconds_since(t0);
  }

  void finish_send(Mem& m, bool dry, int peer, Flight& f) {
    if (!f.sc) return;
    if (!dry) {
      const auto t0 = Clock::now();
      f.sreq->wait();
      stats_.wait_seconds += seconds_since(t0);
    }
    if (f.s_direct)
      for (const Range& rg : f.sc->ranges) consume(m, dry, wp_.send.at(peer)[rg.piece], rg.begin, rg.end);
  }

  void trace_post(const auto& rd, const Flight& f) {
    trace_->post(rd.wave, rd.peer, static_cast<std::uint32_t>(rd.round), f.sc ? f.sc->bytes : 0, f.sc && !f.s_direct,
                 f.rc ? f.rc->bytes : 0, traced_runs(rd.peer, f.sc, f.s_direct, true),
                 traced_runs(rd.peer, f.rc, f.r_direct, false));
  }
  // The runs one side of a message has in the transport (ScheduleEvent::send_runs): a direct
  // chunk's own runs where the pair moves runs (pair_runs), else one (a staging slot or one run).
  std::uint32_t traced_runs(int peer, const Chunk* c, bool direct, bool source) const {
    if (!c || !direct || !pair_runs(peer)) return 1;
    return static_cast<std::uint32_t>(std::max<std::size_t>(1, chunk_runs(peer, *c, source).size()));
  }
  void trace_wait(const auto& rd, const Flight& f) {
    trace_->wait(rd.wave, rd.peer, static_cast<std::uint32_t>(rd.round), f.rc && !f.r_direct ? f.rc->bytes : 0);
  }

  std::uint64_t execute(bool dry) {
    Mem m;
    m.left = src_left_;
    m.unread = unread_init_;
    m.src_live = src_size_;
    m.src_held.assign(src_size_.size(), 0);
    m.dst_live.assign(dst_size_.size(), 0);
    m.committed.assign(dst_size_.size(), {});
    for (std::size_t i = 0; i < src_size_.size(); ++i)
      if (src_size_[i] > 0) {
        m.src_held[i] = 1;
        grow(m, src_size_[i]);
      }
    // Adopted source buffers become their destination buffers, every byte in place.
    for (std::uint32_t i = 0; i < src_size_.size(); ++i) {
      const int j = adopted_src_[i];
      if (j < 0) continue;
      m.src_held[i] = 0;
      m.src_live[i] = 0;
      m.dst_live[j] = 1;
      if (dst_pw_[j]) m.committed[j].assign(granules(dst_size_[j]), 1);
      if (!dry) {
        dst_[j] = src_[i];
        if (!opt_.in_place) src_[i] = nullptr;  // in place: sends still read it (cleared at the end)
        zero_padding(static_cast<std::uint32_t>(j), 0, dst_size_[j]);
        stats_.bytes_kept += adopted_bytes_[i];
      }
    }
    // Source buffers (and granules of page-wise ones) nobody reads from go first.
    for (std::uint32_t i = 0; i < src_size_.size(); ++i) {
      if (adopted_src_[i] >= 0) continue;
      if (m.left[i] == 0) {
        release_src(m, dry, i);
      } else if (src_pw_[i]) {
        for (std::size_t gi = 0; gi < m.unread[i].size(); ++gi)
          if (m.unread[i][gi] == 0) decommit_src(m, dry, i, gi);
      }
    }
    // Staging: depth_[c] slots per direction for link class c, reused by every chunk.
    std::array<std::vector<std::byte*>, 2> send_stage, recv_stage;  // [class][slot]
    for (int c = 0; c < 2; ++c) send_stage[c].assign(depth_[c], nullptr), recv_stage[c].assign(depth_[c], nullptr);
    std::uint64_t staging = 0;
    for (int c = 0; c < classes_; ++c) staging += depth_[c] * (send_stage_size_[c] + recv_stage_size_[c]);
    grow(m, staging);
    if (!dry) {
      stats_.staging_bytes = staging;
      for (int c = 0; c < classes_; ++c)
        for (int i = 0; i < depth_[c]; ++i) {
          if (send_stage_size_[c]) send_stage[c][i] = alloc_.allocate(send_stage_size_[c]);
          if (recv_stage_size_[c]) recv_stage[c][i] = alloc_.allocate(recv_stage_size_[c]);
        }
    }
    // One pipeline per link class (one in all when classes_ == 1) over this rank's sequence of
    // rounds (wave, merged XOR step, round): before round k is waited for, every class has its
    // next rounds posted up to depth_[c] in flight (k's class: k and the depth_[c] - 1 after it),
    // posted in sequence order; rounds are waited for in sequence order. With one class and
    // depth 2 (the default on one node) this is round k+1 posted before round k is waited for,
    // across pair and wave boundaries.
    // No deadlock: every rank's sequence follows one global order of all rounds (the wave, then
    // merge_link_classes' key of the pair's step and class, then the round), both ranks of a
    // pair place their common rounds alike, and a rank waiting for round k has posted every
    // round up to k. Take, among all rounds ranks are waiting for, the first in the global
    // order: its partner is either done or waiting for a round not before it, so it has posted
    // it too, and it completes.
    // A wave's keeps run right after its first round is posted, while that round is on the wire
    // (waves without rounds: when the sequence passes them).
    int kept = 0;  // waves [0, kept) have had their keeps
    auto keeps_through = [&](int w) {
      for (; kept <= w; ++kept) do_keeps(m, dry, kept);
    };
    std::array<std::vector<Flight>, 2> fl;  // [class][slot]
    fl[0].resize(depth_[0]), fl[1].resize(depth_[1]);
    std::array<std::size_t, 2> posted{}, done{};  // per class: rounds posted, rounds finished
    std::size_t next = 0;                         // rounds_[0, next) were looked at for posting
    std::array<std::vector<std::size_t>, 2> queue;  // per class: rounds looked at, not posted
    std::array<std::size_t, 2> queued{};            // per class: queue[c][0, queued[c]) posted
    auto post = [&](std::size_t k) {
      const Round& rd = rounds_[k];
      const int c = rd.cls;
      const int slot = static_cast<int>(posted[c]++ % depth_[c]);
      const PeerWork& pw = work_[rd.wave].at(rd.peer);
      post_send(m, dry, rd.peer, pw, rd.round, fl[c][slot], send_stage[c][slot]);
      post_recv(m, dry, rd.peer, pw, rd.round, fl[c][slot], recv_stage[c][slot]);
      if (trace_) trace_post(rd, fl[c][slot]);
      keeps_through(rd.wave);
    };
    // Posts, in sequence order, every round whose class c has fewer than depth_[c] in flight,
    // until the first round of each class beyond that limit has been seen, the end, or a round
    // of a wave after `last_wave` (with two classes, one runs at most a wave ahead of the round
    // waited for).
    auto has_room = [&](int c) { return posted[c] - done[c] < static_cast<std::size_t>(depth_[c]); };
    auto top_up = [&](int last_wave) {
      for (;;) {
        for (int c = 0; c < classes_; ++c)
          while (queued[c] < queue[c].size() && has_room(c)) post(queue[c][queued[c]++]);
        bool room = false;
        for (int c = 0; c < classes_; ++c) room |= queued[c] == queue[c].size() && has_room(c);
        if (!room || next == rounds_.size() || rounds_[next].wave > last_wave) return;
        queue[rounds_[next].cls].push_back(next);
        ++next;
      }
    };
    std::uint64_t overlapped = 0;
    for (std::size_t k = 0; k < rounds_.size(); ++k) {
      const Round& rd = rounds_[k];
      top_up(classes_ == 2 ? rd.wave + 1 : nwaves_);  // one class: the next round, wherever it is
      const int c = rd.cls;
      Flight& f = fl[c][done[c]++ % depth_[c]];
      overlapped += classes_ == 2 && posted[1 - c] > done[1 - c];
      finish_recv(m, dry, rd.peer, f);
      finish_send(m, dry, rd.peer, f);
      if (trace_) trace_wait(rd, f);
    }
    stats_.overlapped_rounds = overlapped;
    keeps_through(nwaves_ - 1);
    for (std::uint32_t b = 0; b < src_size_.size(); ++b)
      DT_CHECK(!m.src_held[b], "source buffer ", b, " still holds ", m.left[b], " unsent bytes");
    // Destination memory nothing was written to (padding only, or kinds that need not move):
    // buffers, granules; zeroed kinds are zeroed whole.
    for (std::uint32_t b = 0; b < dst_size_.size(); ++b) {
      ensure_dst(m, dry, b);
      for (std::size_t gi = 0; gi < m.committed[b].size(); ++gi) commit_dst(m, dry, b, gi);
      if (!dry && dst_size_[b] > 0 && zeroed(dl_.buffers[b].kind)) {
        const auto t0 = Clock::now();
        alloc_.zero(dst_[b], dst_size_[b]);
        stats_.alloc_seconds += seconds_since(t0);
      }
    }
    if (!dry && opt_.in_place) std::fill(src_.begin(), src_.end(), nullptr);
    if (!dry)
      for (int c = 0; c < classes_; ++c)
        for (int i = 0; i < depth_[c]; ++i) {
          if (send_stage[c][i]) alloc_.release(send_stage[c][i], send_stage_size_[c]);
          if (recv_stage[c][i]) alloc_.release(recv_stage[c][i], recv_stage_size_[c]);
        }
    return m.peak;
  }

  const plan::RankPlan& plan_;
  plan::RankPlan wp_;  // plan_ with pieces cut at slab boundaries (split_plan)
  const vps::RankLayout& sl_;
  std::vector<std::byte*>& src_;
  const vps::RankLayout& dl_;
  std::vector<std::byte*>& dst_;
  const vps::ElemBytes& eb_;
  comm::Transport& t_;
  StateAllocator& alloc_;
  const TransitionOptions& opt_;

  TransitionStats stats_;
  ScheduleTrace* trace_ = nullptr;  // set during the dry run that records the schedule
  std::size_t cap_ = 0;
  std::vector<std::uint64_t> src_size_, dst_size_, src_left_;
  std::uint64_t src_total_ = 0, dst_total_ = 0;
  std::size_t tensors_ = 0;
  std::vector<std::int64_t> slab_rows_;   // per tensor
  std::vector<std::size_t> key_base_;     // first key of each (group, kind, tensor)
  std::size_t granule_ = 0;
  std::vector<char> src_pw_, dst_pw_;     // page-wise buffers
  std::uint64_t pagewise_count_ = 0;
  std::vector<std::vector<std::uint64_t>> unread_init_;
  std::vector<int> adopted_src_, adopted_dst_;  // source buffer -> destination buffer it becomes
  std::vector<std::uint64_t> adopted_bytes_;    // segment bytes of each adopted source buffer
  std::vector<std::vector<Remap>> keep_remaps_;  // per wp_.keep piece, in source order
  // Per destination buffer: the (byte offset, bytes) page ranges remapped keeps fill, sorted.
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> dst_remapped_;
  std::vector<int> wave_of_key_;
  WaveStats wave_stats_;  // all ranks' (load, net) per key (agree_waves)
  int nwaves_ = 0;
  std::vector<std::vector<std::uint32_t>> keeps_;
  WaveWork work_;
  struct Round {
    int wave = 0, peer = 0;
    std::size_t round = 0;
    int cls = 0;   // link class of the pair (link_class)
    int step = 0;  // XOR step: peer = rank ^ step
    std::size_t of = 1;  // rounds of the pair in this wave (the same on both ranks)
  };
  std::vector<Round> rounds_;  // this rank's exchange sequence (build_chunks)
  std::array<std::size_t, 2> send_stage_size_{}, recv_stage_size_{};  // per link class
  std::vector<int> node_;  // per rank: its node (choose_link_classes); all 0 with one class
  int classes_ = 1;        // 2: one pipeline per link class
  std::array<int, 2> depth_{2, 0};  // rounds in flight per class (TransitionOptions::rounds_in_flight)
  int node_steps_ = 1;     // 2^ceil(log2(most ranks on one node)): the intra-node XOR steps
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
  a.kept_zero_copy_bytes += b.kept_zero_copy_bytes;
  a.kept_remapped_bytes += b.kept_remapped_bytes;
  a.messages += b.messages;
  a.zero_copy_sends += b.zero_copy_sends;
  a.zero_copy_recvs += b.zero_copy_recvs;
  a.bytes_sent_direct += b.bytes_sent_direct;
  a.bytes_received_direct += b.bytes_received_direct;
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
  return a;
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
                               std::vector<std::byte*>& dst,
                               const vps::ElemBytes& elem_bytes,
                               comm::Transport& transport, StateAllocator& alloc,
                               const TransitionOptions& options) {
  Engine engine(plan, src_layout, src, dst_layout, dst, elem_bytes, transport, alloc, options);
  return engine.run();
}

}  // namespace dynatrain::exec
