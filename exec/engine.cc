// Implementation notes (the contract is in engine.h, the guarantees in exec/README.md).
//
// run_transition = prepare (validate, count per-buffer outgoing bytes, cut waves and chunks)
//                + agree (three tiny all_gathers: tensor count, per-key load, order choice)
//                + execute(dry) for each candidate order, then execute(real).
// execute() is one function for the dry run and the real run, so the predicted peak is the
// accounted peak by construction: the dry run performs the same allocate / release events in
// the same order, only without touching data or the transport.
#include "exec/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>

#include "common/error.h"
#include "exec/box_copy.h"

namespace dynatrain::exec {
namespace {

constexpr int kTag = 1495;
constexpr std::size_t kMinBudget = 256;

struct Range {
  std::uint32_t piece = 0;
  std::int64_t begin = 0, end = 0;  // row-major elements of the piece's box
};
struct Chunk {
  std::vector<Range> ranges;
  std::size_t bytes = 0;
};

// Greedy, element-granular: a chunk takes whole elements until the next one would not fit.
// Both sides of a pair run this on the same piece list and capacity, so they agree.
std::vector<Chunk> cut_chunks(const std::vector<plan::Piece>& pieces,
                              const std::vector<std::uint32_t>& order,
                              const std::array<int, vps::kNumStateKinds>& eb, std::size_t cap) {
  std::vector<Chunk> out;
  Chunk cur;
  for (std::uint32_t i : order) {
    const plan::Piece& p = pieces[i];
    const std::size_t e = static_cast<std::size_t>(eb[static_cast<int>(p.kind)]);
    const std::int64_t n = p.box.numel();
    std::int64_t pos = 0;
    while (pos < n) {
      const std::int64_t room = static_cast<std::int64_t>((cap - cur.bytes) / e);
      if (room == 0) {
        out.push_back(std::move(cur));
        cur = {};
        continue;
      }
      const std::int64_t take = std::min(room, n - pos);
      cur.ranges.push_back({i, pos, pos + take});
      cur.bytes += static_cast<std::size_t>(take) * e;
      pos += take;
    }
  }
  if (!cur.ranges.empty()) out.push_back(std::move(cur));
  return out;
}

struct PeerWork {
  std::vector<Chunk> send, recv;
};

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

class Engine {
 public:
  Engine(const plan::RankPlan& plan, const vps::RankLayout& sl, std::vector<std::byte*>& src,
         const vps::RankLayout& dl, std::vector<std::byte*>& dst,
         const std::array<int, vps::kNumStateKinds>& eb, comm::Transport& t, StateAllocator& alloc,
         const TransitionOptions& opt)
      : plan_(plan), sl_(sl), src_(src), dl_(dl), dst_(dst), eb_(eb), t_(t), alloc_(alloc),
        opt_(opt) {}

  TransitionStats run() {
    const auto t0 = std::chrono::steady_clock::now();
    validate();
    detect_fanout();
    agree_waves();
    build_chunks();
    stats_.agree_seconds = secs(t0);
    WaveOrder order = opt_.order;
    if (order == WaveOrder::kAuto) {
      const double up = static_cast<double>(execute(true, false)) - std::max(src_total_, dst_total_);
      const double down = static_cast<double>(execute(true, true)) - std::max(src_total_, dst_total_);
      const float mine[2] = {static_cast<float>(up), static_cast<float>(down)};
      std::vector<float> all(2 * static_cast<std::size_t>(t_.size()));
      t_.all_gather(mine, all.data(), 2);
      float worst_up = -1e30f, worst_down = -1e30f;
      for (int r = 0; r < t_.size(); ++r) {
        worst_up = std::max(worst_up, all[2 * r]);
        worst_down = std::max(worst_down, all[2 * r + 1]);
      }
      order = worst_down < worst_up ? WaveOrder::kDescending : WaveOrder::kAscending;
    }
    const bool desc = order == WaveOrder::kDescending;
    stats_.predicted_peak_bytes = execute(true, desc);
    stats_.peak_bytes = execute(false, desc);
    stats_.descending = desc;
    stats_.waves = static_cast<std::uint64_t>(nwaves_);
    stats_.chunk_bytes = cap_;
    stats_.src_bytes = src_total_;
    stats_.dst_bytes = dst_total_;
    stats_.seconds = secs(t0);
    return stats_;
  }

 private:
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

  void validate() {
    const int W = t_.size();
    DT_CHECK_EQ(plan_.rank, t_.rank());
    DT_CHECK_EQ(src_.size(), sl_.buffers.size());
    if (opt_.mem_budget < kMinBudget)
      DT_INPUT_ERROR("memory budget ", opt_.mem_budget, " bytes is too small; use at least ",
                     kMinBudget, " bytes");
    cap_ = opt_.mem_budget / 4 / 8 * 8;
    src_size_.resize(sl_.buffers.size());
    src_left_.assign(sl_.buffers.size(), 0);
    for (std::size_t i = 0; i < sl_.buffers.size(); ++i) {
      src_size_[i] = static_cast<std::uint64_t>(sl_.buffers[i].numel) * elem(sl_.buffers[i].kind);
      DT_CHECK(src_size_[i] == 0 || src_[i] != nullptr, "source buffer ", i, " has no data");
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
      src_left_[p.src_buffer] += piece_bytes(p);
    }
    for (const auto& [peer, pieces] : plan_.send) {
      DT_CHECK(peer >= 0 && peer < W && peer != t_.rank(), "send peer ", peer, " of ", W);
      for (const auto& p : pieces) {
        check_piece(p, true, false);
        DT_CHECK_EQ(p.dst_rank, peer);
        src_left_[p.src_buffer] += piece_bytes(p);
      }
    }
    for (const auto& [peer, pieces] : plan_.recv) {
      DT_CHECK(peer >= 0 && peer < W && peer != t_.rank(), "receive peer ", peer, " of ", W);
      for (const auto& p : pieces) {
        check_piece(p, false, true);
        DT_CHECK_EQ(p.src_rank, peer);
      }
    }
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
      if (opt_.allow_broadcast && broadcast_preferred(static_cast<int>(peers.size()), off_node, bytes))
        stats_.broadcast_preferred_bytes += bytes * (peers.size() - 1);
    }
    stats_.path = "p2p";
    if (stats_.broadcast_preferred_bytes > 0)
      stats_.path = "p2p (the cost model prefers a broadcast for " +
                    std::to_string(stats_.broadcast_preferred_bytes) +
                    " fan-out bytes; the broadcast path is not implemented)";
  }

  // Wave keys: ((expert_group * kinds + kind) * T + tensor), the order of buffer ids.
  std::size_t key_of(const plan::Piece& p, bool expert_group) const {
    return (static_cast<std::size_t>(expert_group) * vps::kNumStateKinds +
            static_cast<std::size_t>(p.kind)) * tensors_ + p.tensor;
  }
  std::size_t src_key(const plan::Piece& p) const { return key_of(p, sl_.buffers[p.src_buffer].expert_group); }
  std::size_t dst_key(const plan::Piece& p) const { return key_of(p, dl_.buffers[p.dst_buffer].expert_group); }

  void agree_waves() {
    const int W = t_.size();
    std::uint32_t local_t = 0;
    auto see = [&](const plan::Piece& p) { local_t = std::max(local_t, p.tensor + 1); };
    for (const auto& p : plan_.keep) see(p);
    for (const auto& [q, v] : plan_.send) for (const auto& p : v) see(p);
    for (const auto& [q, v] : plan_.recv) for (const auto& p : v) see(p);
    const float mine = static_cast<float>(local_t);
    std::vector<float> all(static_cast<std::size_t>(W));
    t_.all_gather(&mine, all.data(), 1);
    tensors_ = static_cast<std::size_t>(*std::max_element(all.begin(), all.end()));
    const std::size_t nkeys = 2 * vps::kNumStateKinds * tensors_;
    // Load of each key on this rank: bytes read from source plus bytes written to destination.
    std::vector<float> load(nkeys, 0.f);
    for (const auto& p : plan_.keep) load[dst_key(p)] += 2.f * static_cast<float>(piece_bytes(p));
    for (const auto& [q, v] : plan_.send) for (const auto& p : v) load[src_key(p)] += static_cast<float>(piece_bytes(p));
    for (const auto& [q, v] : plan_.recv) for (const auto& p : v) load[dst_key(p)] += static_cast<float>(piece_bytes(p));
    std::vector<float> loads(nkeys * static_cast<std::size_t>(W));
    if (nkeys > 0) t_.all_gather(load.data(), loads.data(), nkeys);
    // Cut: a new wave starts before a key that would push some rank's wave load past the target.
    const double target = static_cast<double>(opt_.mem_budget) / 4;
    wave_of_key_.assign(nkeys, 0);
    std::vector<double> cur(static_cast<std::size_t>(W), 0.0);
    int wave = 0;
    bool open = false;  // the current wave holds some load
    for (std::size_t k = 0; k < nkeys; ++k) {
      bool any = false, over = false;
      for (int r = 0; r < W; ++r) {
        const double v = loads[static_cast<std::size_t>(r) * nkeys + k];
        any |= v > 0;
        over |= cur[r] + v > target;
      }
      if (any && over && open) {
        ++wave;
        std::fill(cur.begin(), cur.end(), 0.0);
        open = false;
      }
      for (int r = 0; r < W; ++r) cur[r] += loads[static_cast<std::size_t>(r) * nkeys + k];
      open |= any;
      wave_of_key_[k] = wave;
    }
    nwaves_ = nkeys == 0 ? 0 : wave + 1;
  }

  void build_chunks() {
    keeps_.assign(static_cast<std::size_t>(nwaves_), {});
    work_.assign(static_cast<std::size_t>(nwaves_), {});
    for (std::uint32_t i = 0; i < plan_.keep.size(); ++i)
      keeps_[wave_of_key_[dst_key(plan_.keep[i])]].push_back(i);
    std::vector<std::vector<std::uint32_t>> by_wave(static_cast<std::size_t>(nwaves_));
    for (const auto& [peer, pieces] : plan_.send) {
      for (auto& v : by_wave) v.clear();
      for (std::uint32_t i = 0; i < pieces.size(); ++i) by_wave[wave_of_key_[src_key(pieces[i])]].push_back(i);
      for (int w = 0; w < nwaves_; ++w)
        if (!by_wave[w].empty()) work_[w][peer].send = cut_chunks(pieces, by_wave[w], eb_, cap_);
    }
    for (const auto& [peer, pieces] : plan_.recv) {
      for (auto& v : by_wave) v.clear();
      for (std::uint32_t i = 0; i < pieces.size(); ++i) by_wave[wave_of_key_[dst_key(pieces[i])]].push_back(i);
      for (int w = 0; w < nwaves_; ++w)
        if (!by_wave[w].empty()) work_[w][peer].recv = cut_chunks(pieces, by_wave[w], eb_, cap_);
    }
    // Staging: only chunks that cannot go zero-copy need it.
    for (const auto& wave : work_) {
      for (const auto& [peer, pw] : wave) {
        for (const auto& c : pw.send)
          if (send_direct(peer, c) == nullptr) send_stage_size_ = std::max(send_stage_size_, c.bytes);
        for (const auto& c : pw.recv)
          if (recv_direct_offset(peer, c) < 0) recv_stage_size_ = std::max(recv_stage_size_, c.bytes);
      }
    }
  }

  // The source address of a chunk that is one contiguous run of one source segment (only the
  // offset matters in a dry run), else nullptr.
  const std::byte* send_direct(int peer, const Chunk& c) const {
    if (c.ranges.size() != 1) return nullptr;
    const Range& r = c.ranges[0];
    const plan::Piece& p = plan_.send.at(peer)[r.piece];
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
    const plan::Piece& p = plan_.recv.at(peer)[r.piece];
    const vps::Segment& s = dst_seg(p);
    const std::int64_t off = contiguous_offset(p.box, r.begin, r.end, s.box);
    return off < 0 ? -1 : s.offset + off;
  }

  // ---- memory events (shared by the dry and the real run) ----
  struct Mem {
    std::vector<std::uint64_t> left;
    std::vector<char> src_live, dst_live;
    std::uint64_t live = 0, peak = 0;
  };
  void grow(Mem& m, std::uint64_t bytes) {
    m.live += bytes;
    m.peak = std::max(m.peak, m.live);
  }
  void release_src(Mem& m, bool dry, std::uint32_t b) {
    if (!m.src_live[b]) return;
    m.src_live[b] = 0;
    m.live -= src_size_[b];
    if (!dry) {
      alloc_.release(src_[b], src_size_[b]);
      src_[b] = nullptr;
    }
  }
  void consume(Mem& m, bool dry, std::uint32_t b, std::uint64_t bytes) {
    DT_CHECK(m.left[b] >= bytes, "source buffer ", b, " over-consumed");
    m.left[b] -= bytes;
    if (m.left[b] == 0) release_src(m, dry, b);
  }
  void ensure_dst(Mem& m, bool dry, std::uint32_t b) {
    if (m.dst_live[b] || dst_size_[b] == 0) return;
    m.dst_live[b] = 1;
    grow(m, dst_size_[b]);
    if (dry) return;
    const auto t0 = Clock::now();
    const auto& buf = dl_.buffers[b];
    std::byte* data = alloc_.allocate_destination(buf, dst_size_[b]);
    dst_[b] = data;
    // Zero the padding (bytes of no segment) so that recycled memory leaks nothing.
    const std::size_t e = elem(buf.kind);
    std::int64_t at = 0;
    for (const auto& s : buf.segments) {
      if (s.offset > at) std::memset(data + at * e, 0, static_cast<std::size_t>(s.offset - at) * e);
      at = std::max(at, s.offset + s.box.numel());
    }
    if (buf.numel > at) std::memset(data + at * e, 0, static_cast<std::size_t>(buf.numel - at) * e);
    stats_.alloc_seconds += secs(t0);
  }

  std::uint64_t execute(bool dry, bool descending) {
    Mem m;
    m.left = src_left_;
    m.src_live.assign(src_size_.size(), 0);
    m.dst_live.assign(dst_size_.size(), 0);
    for (std::size_t i = 0; i < src_size_.size(); ++i)
      if (src_size_[i] > 0) {
        m.src_live[i] = 1;
        grow(m, src_size_[i]);
      }
    // Source buffers nobody reads from go first.
    for (std::uint32_t i = 0; i < src_size_.size(); ++i)
      if (m.left[i] == 0) release_src(m, dry, i);
    std::byte* send_stage = nullptr;
    std::byte* recv_stage = nullptr;
    grow(m, send_stage_size_ + recv_stage_size_);
    if (!dry) {
      stats_.staging_bytes = send_stage_size_ + recv_stage_size_;
      if (send_stage_size_) send_stage = alloc_.allocate(send_stage_size_);
      if (recv_stage_size_) recv_stage = alloc_.allocate(recv_stage_size_);
    }
    const int W = t_.size(), me = t_.rank();
    int steps = 1;
    while (steps < W) steps <<= 1;
    std::vector<std::unique_ptr<comm::Request>> reqs;
    for (int wi = 0; wi < nwaves_; ++wi) {
      const int w = descending ? nwaves_ - 1 - wi : wi;
      for (std::uint32_t i : keeps_[w]) {
        const plan::Piece& p = plan_.keep[i];
        ensure_dst(m, dry, p.dst_buffer);
        if (!dry) {
          const auto t0 = Clock::now();
          const auto& s = src_seg(p);
          const auto& d = dst_seg(p);
          const std::size_t e = elem(p.kind);
          copy_box(p.box, src_[p.src_buffer] + s.offset * e, s.box, dst_[p.dst_buffer] + d.offset * e,
                   d.box, e);
          stats_.bytes_kept += piece_bytes(p);
          stats_.keep_seconds += secs(t0);
        }
        consume(m, dry, p.src_buffer, piece_bytes(p));
      }
      for (int s = 1; s < steps; ++s) {
        const int peer = me ^ s;
        if (peer >= W) continue;
        auto it = work_[w].find(peer);
        if (it == work_[w].end()) continue;
        const PeerWork& pw = it->second;
        const std::size_t rounds = std::max(pw.send.size(), pw.recv.size());
        for (std::size_t r = 0; r < rounds; ++r) {
          const Chunk* sc = r < pw.send.size() ? &pw.send[r] : nullptr;
          const Chunk* rc = r < pw.recv.size() ? &pw.recv[r] : nullptr;
          // 1. Pack first, so a source buffer drained by this pack is released before the
          //    receive below may need a new destination buffer.
          const std::byte* sptr = nullptr;
          if (sc) {
            sptr = send_direct(peer, *sc);
            if (!sptr) {
              const auto& pieces = plan_.send.at(peer);
              const auto t0 = Clock::now();
              std::byte* at = send_stage;
              for (const Range& rg : sc->ranges) {
                const plan::Piece& p = pieces[rg.piece];
                const std::size_t e = elem(p.kind);
                if (!dry)
                  at += pack_range(p.box, rg.begin, rg.end, src_[p.src_buffer] + src_seg(p).offset * e,
                                   src_seg(p).box, at, e);
                consume(m, dry, p.src_buffer, static_cast<std::uint64_t>(rg.end - rg.begin) * e);
              }
              sptr = send_stage;
              if (!dry) stats_.pack_seconds += secs(t0);
            }
          }
          // 2. Receive straight into the destination when the chunk is one contiguous run there.
          std::byte* rptr = nullptr;
          bool r_direct = false;
          if (rc) {
            const std::int64_t off = recv_direct_offset(peer, *rc);
            if (off >= 0) {
              const plan::Piece& p = plan_.recv.at(peer)[rc->ranges[0].piece];
              ensure_dst(m, dry, p.dst_buffer);
              if (!dry) rptr = dst_[p.dst_buffer] + static_cast<std::size_t>(off) * elem(p.kind);
              r_direct = true;
            } else {
              rptr = recv_stage;
            }
          }
          // 3. Exchange.
          if (!dry) {
            reqs.clear();
            if (rc) reqs.push_back(t_.irecv(rptr, rc->bytes, peer, kTag));
            if (sc) reqs.push_back(t_.isend(sptr, sc->bytes, peer, kTag));
            const auto t0 = Clock::now();
            comm::wait_all(reqs);
            stats_.wait_seconds += secs(t0);
            if (sc) {
              ++stats_.messages;
              stats_.bytes_sent += sc->bytes;
              stats_.zero_copy_sends += sptr != send_stage;
            }
            if (rc) {
              stats_.bytes_received += rc->bytes;
              stats_.zero_copy_recvs += r_direct;
            }
          }
          // 4. A zero-copy send drained its source only now.
          if (sc && sptr != send_stage) {
            const Range& rg = sc->ranges[0];
            const plan::Piece& p = plan_.send.at(peer)[rg.piece];
            consume(m, dry, p.src_buffer, static_cast<std::uint64_t>(rg.end - rg.begin) * elem(p.kind));
          }
          // 5. Unpack.
          if (rc && !r_direct) {
            const auto& pieces = plan_.recv.at(peer);
            const auto t0 = Clock::now();
            const std::byte* at = recv_stage;
            for (const Range& rg : rc->ranges) {
              const plan::Piece& p = pieces[rg.piece];
              const std::size_t e = elem(p.kind);
              ensure_dst(m, dry, p.dst_buffer);
              if (!dry)
                at += unpack_range(p.box, rg.begin, rg.end, at, dst_[p.dst_buffer] + dst_seg(p).offset * e,
                                   dst_seg(p).box, e);
            }
            if (!dry) stats_.unpack_seconds += secs(t0);
          }
        }
      }
    }
    for (std::uint32_t b = 0; b < src_size_.size(); ++b)
      DT_CHECK(!m.src_live[b], "source buffer ", b, " still holds ", m.left[b], " unsent bytes");
    // Destination buffers nothing was written to (possible only for padding-only buffers).
    for (std::uint32_t b = 0; b < dst_size_.size(); ++b) ensure_dst(m, dry, b);
    if (!dry) {
      if (send_stage) alloc_.release(send_stage, send_stage_size_);
      if (recv_stage) alloc_.release(recv_stage, recv_stage_size_);
    }
    return m.peak;
  }

  const plan::RankPlan& plan_;
  const vps::RankLayout& sl_;
  std::vector<std::byte*>& src_;
  const vps::RankLayout& dl_;
  std::vector<std::byte*>& dst_;
  const std::array<int, vps::kNumStateKinds>& eb_;
  comm::Transport& t_;
  StateAllocator& alloc_;
  const TransitionOptions& opt_;

  TransitionStats stats_;
  std::size_t cap_ = 0;
  std::vector<std::uint64_t> src_size_, dst_size_, src_left_;
  std::uint64_t src_total_ = 0, dst_total_ = 0;
  std::size_t tensors_ = 0;
  std::vector<int> wave_of_key_;
  int nwaves_ = 0;
  std::vector<std::vector<std::uint32_t>> keeps_;
  std::vector<std::map<int, PeerWork>> work_;
  std::size_t send_stage_size_ = 0, recv_stage_size_ = 0;
};

}  // namespace

bool broadcast_preferred(int receivers, int off_node, std::uint64_t bytes) {
  return receivers >= 2 && off_node >= 2 && bytes >= (1u << 20);
}

TransitionStats run_transition(const plan::RankPlan& plan, const vps::RankLayout& src_layout,
                               std::vector<std::byte*>& src, const vps::RankLayout& dst_layout,
                               std::vector<std::byte*>& dst,
                               const std::array<int, vps::kNumStateKinds>& elem_bytes,
                               comm::Transport& transport, StateAllocator& alloc,
                               const TransitionOptions& options) {
  Engine engine(plan, src_layout, src, dst_layout, dst, elem_bytes, transport, alloc, options);
  return engine.run();
}

}  // namespace dynatrain::exec
