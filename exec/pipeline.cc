#include "exec/pipeline.h"

#include <map>
#include <set>
#include <utility>

#include "common/clock.h"
#include "common/error.h"
#include "exec/box_copy.h"

namespace dynatrain::exec {
namespace {

constexpr int kTag = 1495;
// Direct sends a rank keeps posted ahead of their rounds (post_sends_ahead), at most.
constexpr std::size_t kSendsAhead = 64;

// One round of one pair in flight: the chunks, where they travel from / to, the requests.
struct Flight {
  int peer = -1;
  const Chunk* sc = nullptr;
  const Chunk* rc = nullptr;
  std::byte* rptr = nullptr;  // staging slot of a receive that is not direct
  bool s_direct = false, r_direct = false;
  std::unique_ptr<comm::Request> sreq, rreq;
};

class Pipeline {
 public:
  Pipeline(const PipelineWork& w, const PipelineContext& c) : w_(w), c_(c), dry_(c.ledger.dry()) {
    for (int k = 0; k < 2; ++k) flights_[k].resize(w.depth[k]);
    moved_.assign(w.remaps.moves, 0);
    send_posted_.assign(w.rounds.size(), 0);
  }

  void run() {
    const int waves = static_cast<int>(w_.work.size());
    std::uint64_t overlapped = 0;
    for (std::size_t k = 0; k < w_.rounds.size(); ++k) {
      const Round& rd = w_.rounds[k];
      top_up(w_.classes == 2 ? rd.wave + 1 : waves);  // one class: the next round, wherever it is
      post_sends_ahead();
      const int c = rd.cls;
      Flight& f = flights_[c][done_[c]++ % w_.depth[c]];
      overlapped += w_.classes == 2 && posted_[1 - c] > done_[1 - c];
      finish_recv(rd.peer, f);
      finish_send(rd.peer, f);
      if (c_.trace) trace_wait(rd, f);
    }
    c_.stats.overlapped_rounds = overlapped;
    keeps_through(waves - 1);
    DT_CHECK(ahead_.empty(), ahead_.size(), " sends posted ahead of rounds that never ran");
  }

 private:
  // ---- the schedule: which round is posted when ----
  bool has_room(int c) const { return posted_[c] - done_[c] < static_cast<std::size_t>(w_.depth[c]); }
  // Posts, in sequence order, every round whose class c has fewer than depth[c] in flight,
  // until the first round of each class beyond that limit has been seen, the end, or a round
  // of a wave after `last_wave`.
  void top_up(int last_wave) {
    for (;;) {
      for (int c = 0; c < w_.classes; ++c)
        while (queued_[c] < queue_[c].size() && has_room(c)) post(queue_[c][queued_[c]++]);
      bool room = false;
      for (int c = 0; c < w_.classes; ++c) room |= queued_[c] == queue_[c].size() && has_room(c);
      if (!room || next_ == w_.rounds.size() || w_.rounds[next_].wave > last_wave) return;
      queue_[w_.rounds[next_].cls].push_back(next_);
      ++next_;
    }
  }
  void post(std::size_t k) {
    const Round& rd = w_.rounds[k];
    const int c = rd.cls;
    const int slot = static_cast<int>(posted_[c]++ % w_.depth[c]);
    const PeerWork& pw = w_.work[rd.wave].at(rd.peer);
    Flight& f = flights_[c][slot];
    f.peer = rd.peer;
    post_send(k, pw, f, c_.staging.send[c][slot]);
    post_recv(rd.peer, pw, rd.round, f, c_.staging.recv[c][slot]);
    if (c_.trace) trace_post(rd, f);
    keeps_through(rd.wave);
  }
  // A wave's keeps run right after its first round is posted (waves without rounds: when the
  // sequence passes them).
  void keeps_through(int w) {
    for (; kept_ <= w; ++kept_) run_keeps(kept_);
  }
  void run_keeps(int w);
  // Over a runs pair the receiver copies (cross-memory attach) only inside a wait or a test
  // (comm/README.md), so a rank copying its keeps would hold its peer's sends in flight until
  // the keeps end: between keeps, the rounds in flight are tested, which moves what has arrived.
  // One runs test advances every posted runs request of the transport, so the walk ends at the
  // first request not done: the requests after it were advanced by that test already. (Per
  // peer, flights finish in posting order, as a pair's messages match in order.)
  void progress_flights() {
    for (int c = 0; c < w_.classes; ++c)
      for (std::size_t k = done_[c]; k < posted_[c]; ++k) {
        Flight& f = flights_[c][k % w_.depth[c]];
        if (!c_.direct.pair_runs(f.peer)) continue;
        if ((f.rreq && !f.rreq->test()) || (f.sreq && !f.sreq->test())) return;
      }
  }

  // ---- one round's messages ----
  void post_recv(int peer, const PeerWork& pw, std::size_t r, Flight& f, std::byte* stage);
  void post_send(std::size_t k, const PeerWork& pw, Flight& f, std::byte* stage);
  std::unique_ptr<comm::Request> send_request(int peer, const Chunk& ch, std::byte* stage);
  void post_sends_ahead();
  void pack(int peer, const Chunk& ch, std::byte* stage);
  void finish_recv(int peer, Flight& f);
  void finish_send(int peer, Flight& f);

  // The watchdog's sign of life (TransitionOptions::progress): bytes finished.
  void advance(std::uint64_t bytes) const {
    if (c_.progress) c_.progress->fetch_add(bytes, std::memory_order_relaxed);
  }

  void trace_post(const Round& rd, const Flight& f) {
    c_.trace->post(rd.wave, rd.peer, static_cast<std::uint32_t>(rd.round), f.sc ? f.sc->bytes : 0, f.sc && !f.s_direct,
                   f.rc ? f.rc->bytes : 0, c_.direct.traced_runs(rd.peer, f.sc, f.s_direct, true),
                   c_.direct.traced_runs(rd.peer, f.rc, f.r_direct, false));
  }
  void trace_wait(const Round& rd, const Flight& f) {
    c_.trace->wait(rd.wave, rd.peer, static_cast<std::uint32_t>(rd.round), f.rc && !f.r_direct ? f.rc->bytes : 0);
  }

  const PipelineWork& w_;
  const PipelineContext& c_;
  const bool dry_;
  std::array<std::vector<Flight>, 2> flights_;     // [class][slot]
  std::array<std::size_t, 2> posted_{}, done_{};   // per class: rounds posted, rounds finished
  std::size_t next_ = 0;                           // rounds[0, next_) were looked at for posting
  std::array<std::vector<std::size_t>, 2> queue_;  // per class: rounds looked at, not posted
  std::array<std::size_t, 2> queued_{};            // per class: queue_[c][0, queued_[c]) posted
  int kept_ = 0;                                   // waves [0, kept_) have had their keeps
  std::vector<std::uint8_t> moved_;                // per remap move: made (by the first keep of its chain to run)
  // Sends posted ahead of their round (post_sends_ahead), by round index; rounds [0, ahead_next_)
  // were looked at for it; peers in ahead_stopped_ get no more sends ahead.
  std::map<std::size_t, std::unique_ptr<comm::Request>> ahead_;
  std::size_t ahead_next_ = 0;
  std::set<int> ahead_stopped_;
  std::vector<std::uint8_t> send_posted_;  // per round: its send was posted (ahead or in its round)
};

void Pipeline::run_keeps(int w) {
  for (std::uint32_t i : w_.keeps[w]) {
    const plan::Piece& p = w_.plan.keep[i];
    const std::vector<Remap>& remaps = w_.remaps.per_keep[i];
    c_.ledger.touch(p, 0, p.box.numel());
    if (c_.trace)  // the simulator costs copied bytes only: remapped pages move no byte
      c_.trace->keep(c_.geometry.bytes(p) - remapped_bytes(p, remaps, c_.geometry));
    if (!dry_) {
      progress_flights();
      const auto t0 = Clock::now();
      run_keep(p, remaps, c_.geometry, c_.src, c_.dst, c_.alloc, moved_, c_.stats);
      c_.stats.bytes_kept += c_.geometry.bytes(p);
      c_.stats.keep_seconds += seconds_since(t0);
      advance(c_.geometry.bytes(p));
    }
    c_.ledger.consume(p, 0, p.box.numel());
  }
}

// Posts the receive of round r: straight into the destination runs when the chunk goes direct
// (DirectRuns::chunk_direct), else into `stage`. A direct chunk's destination memory is made
// live here, before the transport may write it.
void Pipeline::post_recv(int peer, const PeerWork& pw, std::size_t r, Flight& f, std::byte* stage) {
  f.rc = r < pw.recv.size() ? &pw.recv[r] : nullptr;
  f.rreq.reset();
  if (!f.rc) return;
  f.r_direct = f.rc->direct;
  f.rptr = stage;
  if (f.r_direct) {
    const auto& pieces = w_.plan.recv.at(peer);
    for (const Range& rg : f.rc->ranges) c_.ledger.touch(pieces[rg.piece], rg.begin, rg.end);
  }
  if (dry_) return;
  if (c_.direct.pair_runs(peer)) {
    auto [base, runs] = f.r_direct ? c_.direct.comm_runs(peer, *f.rc, false)
                                   : std::pair{stage, std::vector<comm::ByteRun>{{0, f.rc->bytes}}};
    f.rreq = c_.transport.irecv_runs(base, std::move(runs), peer, kTag);
    return;
  }
  if (f.r_direct) {
    const plan::Piece& p = w_.plan.recv.at(peer)[f.rc->ranges[0].piece];
    f.rptr = c_.dst[p.dst_buffer] +
             static_cast<std::size_t>(c_.direct.recv_direct_offset(peer, *f.rc)) * c_.geometry.elem(p.kind);
  }
  f.rreq = c_.transport.irecv(f.rptr, f.rc->bytes, peer, kTag);
}

// Copies a chunk's ranges into `stage` (real run) and consumes them (both runs).
void Pipeline::pack(int peer, const Chunk& ch, std::byte* stage) {
  const auto& pieces = w_.plan.send.at(peer);
  const auto t0 = Clock::now();
  std::byte* at = stage;
  for (const Range& rg : ch.ranges) {
    const plan::Piece& p = pieces[rg.piece];
    const std::size_t e = c_.geometry.elem(p.kind);
    const vps::Segment& s = c_.geometry.src_seg(p);
    if (!dry_) at += pack_range(p.box, rg.begin, rg.end, c_.src[p.src_buffer] + s.offset * e, s.box, at, e, c_.alloc);
    c_.ledger.consume(p, rg.begin, rg.end);
  }
  if (!dry_) c_.stats.pack_seconds += seconds_since(t0);
}

// Packs round k's send chunk into `stage` unless it goes direct, and posts the send (or takes
// the request posted ahead of the round). A packed source range is consumed (and maybe given
// back) right after the pack; a direct one after its send completed (finish_send).
void Pipeline::post_send(std::size_t k, const PeerWork& pw, Flight& f, std::byte* stage) {
  const Round& rd = w_.rounds[k];
  f.sc = rd.round < pw.send.size() ? &pw.send[rd.round] : nullptr;
  f.sreq.reset();
  if (!f.sc) return;
  f.s_direct = f.sc->direct;
  if (auto it = ahead_.find(k); it != ahead_.end()) {
    f.sreq = std::move(it->second);
    ahead_.erase(it);
    return;
  }
  if (!f.s_direct) pack(rd.peer, *f.sc, stage);
  if (dry_) return;
  f.sreq = send_request(rd.peer, *f.sc, stage);
  send_posted_[k] = 1;
}

std::unique_ptr<comm::Request> Pipeline::send_request(int peer, const Chunk& ch, std::byte* stage) {
  std::unique_ptr<comm::Request> req;
  if (c_.direct.pair_runs(peer)) {
    auto [base, runs] =
        ch.direct ? c_.direct.comm_runs(peer, ch, true) : std::pair{stage, std::vector<comm::ByteRun>{{0, ch.bytes}}};
    req = c_.transport.isend_runs(base, std::move(runs), peer, kTag);
  } else {
    req = c_.transport.isend(ch.direct ? c_.direct.send_direct(peer, ch) : stage, ch.bytes, peer, kTag);
  }
  ++c_.stats.messages;
  c_.stats.bytes_sent += ch.bytes;
  c_.stats.zero_copy_sends += ch.direct;
  if (ch.direct) c_.stats.bytes_sent_direct += ch.bytes;
  return req;
}

// A direct send over a runs pair holds no staging and reads source memory that stays valid
// until the send completes (finish_send consumes it; remapped keeps never take a sent page), so
// it may be posted before its round: the receiver then reads chunk after chunk without waiting
// for this rank to notice each completion and post the next (on a machine with fewer cores than
// processes, the sender may not run for milliseconds). Per peer, sends stay in round order (a
// pair's messages match in order): a peer's sends go ahead up to its first send that cannot (a
// staged one, or over a pair without runs), and none after it. No ledger event moves (direct
// sends touch no memory when posted), so the dry run's prediction holds; a real run only.
void Pipeline::post_sends_ahead() {
  if (dry_) return;
  for (; ahead_next_ < w_.rounds.size() && ahead_.size() < kSendsAhead; ++ahead_next_) {
    const std::size_t k = ahead_next_;
    if (send_posted_[k]) continue;
    const Round& rd = w_.rounds[k];
    const PeerWork& pw = w_.work[rd.wave].at(rd.peer);
    if (rd.round >= pw.send.size() || ahead_stopped_.count(rd.peer)) continue;
    const Chunk& ch = pw.send[rd.round];
    if (!ch.direct || !c_.direct.pair_runs(rd.peer)) {
      ahead_stopped_.insert(rd.peer);
      continue;
    }
    ahead_.emplace(k, send_request(rd.peer, ch, nullptr));
    send_posted_[k] = 1;
    ++c_.stats.sends_ahead;
  }
}

void Pipeline::finish_recv(int peer, Flight& f) {
  if (!f.rc) return;
  if (!dry_) {
    const auto t0 = Clock::now();
    f.rreq->wait();
    c_.stats.wait_seconds += seconds_since(t0);
    c_.stats.bytes_received += f.rc->bytes;
    advance(f.rc->bytes);
    c_.stats.zero_copy_recvs += f.r_direct;
    if (f.r_direct) c_.stats.bytes_received_direct += f.rc->bytes;
  }
  if (f.r_direct) return;
  const auto& pieces = w_.plan.recv.at(peer);
  const auto t0 = Clock::now();
  const std::byte* at = f.rptr;
  for (const Range& rg : f.rc->ranges) {
    const plan::Piece& p = pieces[rg.piece];
    const std::size_t e = c_.geometry.elem(p.kind);
    const vps::Segment& d = c_.geometry.dst_seg(p);
    c_.ledger.touch(p, rg.begin, rg.end);
    if (!dry_) at += unpack_range(p.box, rg.begin, rg.end, at, c_.dst[p.dst_buffer] + d.offset * e, d.box, e, c_.alloc);
  }
  if (!dry_) c_.stats.unpack_seconds += seconds_since(t0);
}

void Pipeline::finish_send(int peer, Flight& f) {
  if (!f.sc) return;
  if (!dry_) {
    const auto t0 = Clock::now();
    f.sreq->wait();
    c_.stats.wait_seconds += seconds_since(t0);
    advance(f.sc->bytes);
  }
  if (f.s_direct)
    for (const Range& rg : f.sc->ranges) c_.ledger.consume(w_.plan.send.at(peer)[rg.piece], rg.begin, rg.end);
}

}  // namespace

void run_pipeline(const PipelineWork& work, const PipelineContext& ctx) { Pipeline(work, ctx).run(); }

}  // namespace dynatrain::exec
