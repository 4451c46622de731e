// Trainer::forward_backward(): the next batch's loss, full-model logits and dp-reduced gradients
// without an update and without advancing the data (tests compare them with a single-rank
// reference). Invariants: nothing but the grad arena (and ZeRO working copies) changes; the
// logits arrive at world rank 0 in global [sequence, position, vocab] order.
#include <algorithm>
#include <cstring>

#include "train/context_parallel.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

using vps::StateKind;

Trainer::Probe Trainer::Impl::probe() {
  Trainer::Probe p;
  std::vector<float> logits;
  if (rc.active) {
    zero_grads();
    gather_params();
    float loss = static_cast<float>(run_microbatches(&logits));
    reduce_tp_partial_grads();
    for (const auto& gb : rank_layout.buffers) {
      if (gb.kind != StateKind::kGrad) continue;
      comm::Transport* g = shard_group(gb.expert_group);
      if (cfg().zero >= 2)
        reduce_scatter_or_copy(*g, zero_work.full(StateKind::kGrad, gb, arenas), arenas.data(gb), gb.numel);
      else if (g->size() > 1)
        g->all_reduce_sum(arenas.data(gb), gb.numel);
    }
    active_g->all_reduce_sum(&loss, 1);
    p.loss = loss;
  }
  gather_logits(logits, p);
  return p;
}

// Logits of the last stage to rank 0: rows by dp rank, columns by tp rank.
void Trainer::Impl::gather_logits(const std::vector<float>& logits, Trainer::Probe& p) {
  const auto& c = cfg();
  const std::int64_t V = opt.model.vocab, rows = opt.global_batch * opt.seq, local_rows = rows / c.dp;
  // Vocab rows per tp rank as vps/layout.cc pads them; a rank of only padding sends nothing.
  const std::int64_t pad_to = opt.model.vocab_divisible_by * c.tp;
  const std::int64_t vl = (V + pad_to - 1) / pad_to * pad_to / c.tp;
  auto valid_of = [&](int tp_rank) { return std::clamp<std::int64_t>(V - tp_rank * vl, 0, vl); };
  const bool sender = rc.active && rc.pp == c.pp - 1 && valid_of(rc.tp) > 0;
  comm::Transport& world = this->world();
  if (world.rank() != 0) {
    if (sender) world.isend(logits.data(), logits.size() * sizeof(float), 0, kTagLogits)->wait();
    return;
  }
  p.logits.assign(rows * V, 0.0f);
  for (int r = 0; r < c.world_size(); ++r) {
    const auto k = vps::rank_coords(c, r);
    const std::int64_t v0 = k.tp * vl, valid = valid_of(k.tp);
    if (k.pp != c.pp - 1 || valid == 0) continue;
    std::vector<float> buf(local_rows / c.cp * valid);
    if (r == 0)
      buf = logits;
    else
      world.irecv(buf.data(), buf.size() * sizeof(float), r, kTagLogits)->wait();
    // Row i of rank r: sequence i / sl of its dp rank, position pos[i % sl] (context_parallel.h).
    const std::int64_t S = opt.seq, sl = S / c.cp;
    const auto pos = cp_positions(k.cp, c.cp, S);
    for (std::int64_t i = 0; i < local_rows / c.cp; ++i)
      std::memcpy(&p.logits[(k.dp * local_rows + i / sl * S + pos[i % sl]) * V + v0], &buf[i * valid],
                  valid * sizeof(float));
  }
}

}  // namespace dynatrain::train
