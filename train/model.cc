#include "train/model.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/error.h"
#include "train/context_parallel.h"
#include "train/interrupt.h"

namespace dynatrain::train {

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

constexpr double kNormEps = 1e-5;

std::int64_t to_handle(comm::Transport* t) { return reinterpret_cast<std::intptr_t>(t); }
comm::Transport* from_handle(const c10::IValue& v) {
  return reinterpret_cast<comm::Transport*>(static_cast<std::intptr_t>(v.toInt()));
}

Tensor all_reduce(const Tensor& x, comm::Transport* g) {
  Tensor out = x.contiguous().clone();
  g->all_reduce_sum(out.data_ptr<float>(), static_cast<std::size_t>(out.numel()));
  return out;
}

// Concatenation along dim 0 of every rank's x (all ranks pass the same shape).
Tensor all_gather0(const Tensor& x, comm::Transport* g) {
  Tensor in = x.contiguous();
  auto sizes = in.sizes().vec();
  sizes[0] *= g->size();
  Tensor out = torch::empty(sizes, in.options());
  g->all_gather(in.data_ptr<float>(), out.data_ptr<float>(), static_cast<std::size_t>(in.numel()));
  return out;
}

// Sum over the ranks of g of x, of which this rank keeps rows [rank * n / size, ...) (dim 0).
Tensor reduce_scatter0(const Tensor& x, comm::Transport* g) {
  Tensor in = x.contiguous();
  auto sizes = in.sizes().vec();
  sizes[0] /= g->size();
  Tensor out = torch::empty(sizes, in.options());
  g->reduce_scatter_sum(in.data_ptr<float>(), out.data_ptr<float>(), static_cast<std::size_t>(out.numel()));
  return out;
}

Tensor rows_of_rank(const Tensor& x, int rank, int size) {
  const std::int64_t per = x.size(0) / size;
  return x.narrow(0, rank * per, per).contiguous();
}

// Identity forward, all-reduce of the gradient over the tp group backward.
struct CopyToTp : Function<CopyToTp> {
  static Tensor forward(AutogradContext* ctx, Tensor x, std::int64_t g) {
    ctx->saved_data["g"] = g;
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {all_reduce(grad[0], from_handle(ctx->saved_data["g"])), Tensor()};
  }
};

// All-reduce forward, identity backward.
struct ReduceFromTp : Function<ReduceFromTp> {
  static Tensor forward(AutogradContext* ctx, Tensor x, std::int64_t g) {
    return all_reduce(x, reinterpret_cast<comm::Transport*>(static_cast<std::intptr_t>(g)));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) { return {grad[0], Tensor()}; }
};

// Rows of a [n, ...] tensor spread over a group g. `sum` = 0: the rows are replicated over g
// and each rank takes its 1/size; `sum` = 1: each rank holds a partial sum of all rows (or uses
// all rows, for the gradient), so the split is a reduce-scatter.
Tensor split_rows(const Tensor& x, comm::Transport* g, bool sum) {
  return sum ? reduce_scatter0(x, g) : rows_of_rank(x, g->rank(), g->size());
}

// Forward: this rank's 1/size of the rows (sum: of their sum over g); backward: all-gather of
// the row gradients.
struct SplitRows : Function<SplitRows> {
  static Tensor forward(AutogradContext* ctx, Tensor x, std::int64_t g, std::int64_t sum) {
    ctx->saved_data["g"] = g;
    return split_rows(x, from_handle(g), sum != 0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {all_gather0(grad[0], from_handle(ctx->saved_data["g"])), Tensor(), Tensor()};
  }
};

// Forward: all-gather of the rows; backward: this rank's rows of the gradient (sum: of its sum
// over g, when every rank of g computed with all rows, as expert TP's token gather does).
struct GatherRows : Function<GatherRows> {
  static Tensor forward(AutogradContext* ctx, Tensor x, std::int64_t g, std::int64_t sum) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["sum"] = sum;
    return all_gather0(x, from_handle(g));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {split_rows(grad[0], from_handle(ctx->saved_data["g"]), ctx->saved_data["sum"].toInt() != 0), Tensor(),
            Tensor()};
  }
};

Tensor all_to_all_rows(const Tensor& x, const std::vector<std::int64_t>& send_rows,
                       const std::vector<std::int64_t>& recv_rows, comm::Transport* g) {
  Tensor in = x.contiguous();
  const std::int64_t row_width = in.dim() > 1 ? in.size(1) : 1;
  const std::size_t row_bytes = static_cast<std::size_t>(row_width) * sizeof(float);
  std::vector<std::size_t> sc, so, rc, ro;
  std::size_t s_off = 0, r_off = 0;
  std::int64_t total = 0;
  for (std::size_t j = 0; j < send_rows.size(); ++j) {
    sc.push_back(send_rows[j] * row_bytes);
    so.push_back(s_off);
    s_off += sc.back();
    rc.push_back(recv_rows[j] * row_bytes);
    ro.push_back(r_off);
    r_off += rc.back();
    total += recv_rows[j];
  }
  Tensor out = torch::empty({total, row_width}, in.options());
  g->all_to_all(in.data_ptr<float>(), sc, so, out.data_ptr<float>(), rc, ro);
  return out;
}

// Expert-parallel token exchange: rows [send_rows[j] for rank j]; backward is the reverse.
struct AllToAllRows : Function<AllToAllRows> {
  static Tensor forward(AutogradContext* ctx, Tensor x, std::vector<std::int64_t> send_rows,
                        std::vector<std::int64_t> recv_rows, std::int64_t g) {
    ctx->saved_data["g"] = g;
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    return all_to_all_rows(x, send_rows, recv_rows, from_handle(g));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto send = ctx->saved_data["send"].toIntVector();
    auto recv = ctx->saved_data["recv"].toIntVector();
    return {all_to_all_rows(grad[0], recv, send, from_handle(ctx->saved_data["g"])), Tensor(), Tensor(), Tensor()};
  }
};

// Cross-entropy over vocab-parallel logits [N, vocab_l] (columns [v0, v0 + vocab_l) of the
// vocab): per-token loss [N]. max, sum of exponentials and the target logit are combined over
// the tp group; the backward needs no communication. A rank whose shard is only vocab padding
// (vocab_l = 0 valid columns) still takes part in every collective: its max is -inf, its sum of
// exponentials and target logit 0.
struct VocabParallelCrossEntropy : Function<VocabParallelCrossEntropy> {
  static Tensor forward(AutogradContext* ctx, Tensor logits, Tensor targets, std::int64_t v0, std::int64_t g) {
    auto* t = from_handle(g);
    const std::int64_t vl = logits.size(1);
    Tensor m = vl > 0 ? std::get<0>(logits.max(1))
                      : torch::full({logits.size(0)}, -std::numeric_limits<float>::infinity(), logits.options());
    if (t != nullptr) m = std::get<0>(all_gather0(m.unsqueeze(0), t).max(0));
    Tensor e = (logits - m.unsqueeze(1)).exp();
    Tensor sum = e.sum(1);
    Tensor in_range = (targets >= v0).logical_and(targets < v0 + vl);
    Tensor idx = (targets - v0).clamp(0, std::max<std::int64_t>(vl - 1, 0));
    Tensor target_logit = vl > 0 ? logits.gather(1, idx.unsqueeze(1)).squeeze(1) * in_range.to(torch::kFloat)
                                 : torch::zeros({logits.size(0)}, logits.options());
    if (t != nullptr) {
      sum = all_reduce(sum, t);
      target_logit = all_reduce(target_logit, t);
    }
    Tensor softmax = e / sum.unsqueeze(1);
    ctx->save_for_backward({softmax, idx, in_range});
    return sum.log() + m - target_logit;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    Tensor g = saved[0].clone();
    Tensor hit = saved[2].to(torch::kFloat);
    if (g.size(1) > 0) g.scatter_add_(1, saved[1].unsqueeze(1), -hit.unsqueeze(1));
    return {g * grad[0].unsqueeze(1), Tensor(), Tensor(), Tensor()};
  }
};

Tensor copy_to_tp(const Tensor& x, const ModelComms& c) {
  return c.tp_size > 1 ? CopyToTp::apply(x, to_handle(c.tp)) : x;
}
Tensor reduce_from_tp(const Tensor& x, const ModelComms& c) {
  return c.tp_size > 1 ? ReduceFromTp::apply(x, to_handle(c.tp)) : x;
}

// x @ wt for an activation x (fp32) and a transposed weight wt: with a bf16 weight (--bf16) the
// product runs in bf16 (x rounded to bf16) and comes back as fp32, so activations, norms,
// softmax and the communication stay fp32 -- what CPU autocast does for a matmul. Backward: the
// weight's gradient is bf16 (autograd adds it into the fp32 .grad), the input's fp32.
Tensor weight_mm(const Tensor& x, const Tensor& wt) {
  if (wt.scalar_type() == x.scalar_type()) return torch::matmul(x, wt);
  return torch::matmul(x.to(wt.scalar_type()), wt).to(x.scalar_type());
}

Tensor rms_norm(const Tensor& x, const Tensor& w) { return x * torch::rsqrt(x.pow(2).mean(-1, true) + kNormEps) * w; }

// Rotary position embedding (rotate-half form) over the last dim; cos/sin shaped to broadcast.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

// The global positions of this rank's local tokens (s of them), as a float tensor [s].
Tensor local_positions(const ModelComms& c, std::int64_t s) {
  const auto p = cp_positions(c.cp_rank, c.cp_size, s * c.cp_size);
  return torch::tensor(p, torch::kLong).to(torch::kFloat);
}

// cos and sin [s, dim/2] of RoPE over `dim` dims at this rank's positions.
std::pair<Tensor, Tensor> rope_tables(const ModelComms& c, std::int64_t s, std::int64_t dim) {
  Tensor inv_freq = torch::pow(10000.0, -torch::arange(0, dim, 2, torch::kFloat) / static_cast<double>(dim));
  Tensor angle = local_positions(c, s).unsqueeze(1) * inv_freq.unsqueeze(0);
  return {angle.cos(), angle.sin()};
}

// Keys / values [mb, s_l, ...] of every cp rank, concatenated along positions in cp rank order
// (forward all-gather; backward reduce-scatter: every rank's queries used all of them).
Tensor gather_seq(const Tensor& x, const ModelComms& c) {
  if (c.cp_size == 1) return x;
  std::vector<std::int64_t> to_front(x.dim()), back(x.dim());
  for (std::int64_t i = 0; i < x.dim(); ++i) to_front[i] = back[i] = i;
  std::swap(to_front[0], to_front[1]);
  Tensor g = GatherRows::apply(x.permute(to_front).contiguous(), to_handle(c.cp), 1);
  return g.permute(to_front);
}

// Multi-head latent attention (DeepSeek-V2): q (optionally through a normed low-rank q_down),
// a shared compressed kv (kv_down -> RMSNorm -> per-head kv_up) plus one RoPE key part shared
// by all heads. The down projections are replicated and see every rank's local heads only, so
// their gradients are partial over tp (completed by the trainer, like q_norm / k_norm).
Tensor mla_attention(const LayerWeights& w, const vps::ModelSpec& spec, const ModelComms& c, const Tensor& x,
                     const Tensor& mask) {
  const std::int64_t mb = x.size(0), s = x.size(1), h = spec.hidden;
  const std::int64_t nope = spec.qk_nope_dim, rd = spec.qk_rope_dim, vd = spec.v_head_dim, r = spec.kv_lora_rank;
  Tensor xi = copy_to_tp(rms_norm(x, w.input_norm), c);
  Tensor q;
  if (w.q_down.defined()) {
    Tensor cq = rms_norm(weight_mm(xi, w.q_down.t()), w.q_down_norm);
    q = weight_mm(cq, w.q_up.reshape({-1, spec.q_lora_rank}).t());
  } else {
    q = weight_mm(xi, w.q.reshape({-1, h}).t());
  }
  const std::int64_t heads = q.size(-1) / (nope + rd);
  q = q.view({mb, s, heads, nope + rd});
  Tensor kv_down = weight_mm(xi, w.kv_down.t());  // [mb, s, r + rd]
  Tensor kv = weight_mm(rms_norm(kv_down.narrow(-1, 0, r), w.kv_down_norm), w.kv_up.reshape({-1, r}).t())
                  .view({mb, s, heads, nope + vd});
  auto [cos, sin] = rope_tables(c, s, rd);
  Tensor q_pe = rope(q.narrow(-1, nope, rd), cos.view({1, s, 1, rd / 2}), sin.view({1, s, 1, rd / 2}));
  Tensor k_pe = rope(kv_down.narrow(-1, r, rd), cos.view({1, s, rd / 2}), sin.view({1, s, rd / 2}));
  Tensor qf = torch::cat({q.narrow(-1, 0, nope), q_pe}, -1).transpose(1, 2);
  Tensor kf = gather_seq(torch::cat({kv.narrow(-1, 0, nope), k_pe.unsqueeze(2).expand({mb, s, heads, rd})}, -1), c)
                  .transpose(1, 2);
  Tensor v = gather_seq(kv.narrow(-1, nope, vd), c).transpose(1, 2);
  Tensor scores = torch::matmul(qf, kf.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(nope + rd)));
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  Tensor o = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({mb, s, heads * vd});
  return reduce_from_tp(weight_mm(o, w.proj.t()), c);
}

Tensor attention(const LayerWeights& w, const vps::ModelSpec& spec, const ModelComms& c, const Tensor& x,
                 const Tensor& cos, const Tensor& sin, const Tensor& mask) {
  if (w.kv_down.defined()) return mla_attention(w, spec, c, x, mask);
  const std::int64_t mb = x.size(0), s = x.size(1), h = spec.hidden, d = spec.head_dim;
  const std::int64_t groups = w.qkv.size(0), ql = w.qkv.size(1) - 2, heads = groups * ql;
  Tensor xi = copy_to_tp(rms_norm(x, w.input_norm), c);
  Tensor qkv = weight_mm(xi, w.qkv.reshape({-1, h}).t());
  if (w.qkv_bias.defined()) qkv = qkv + w.qkv_bias.reshape({-1});
  qkv = qkv.view({mb, s, groups, ql + 2, d});
  Tensor q = qkv.narrow(3, 0, ql);
  Tensor k = qkv.select(3, ql);
  Tensor v = qkv.select(3, ql + 1);
  if (spec.qk_norm) {
    q = rms_norm(q, w.q_norm);
    k = rms_norm(k, w.k_norm);
  }
  q = rope(q, cos.view({1, s, 1, 1, d / 2}), sin.view({1, s, 1, 1, d / 2}));
  k = rope(k, cos.view({1, s, 1, d / 2}), sin.view({1, s, 1, d / 2}));
  k = gather_seq(k, c);
  v = gather_seq(v, c);
  const std::int64_t sk = k.size(1);  // key positions: s * cp
  k = k.unsqueeze(3).expand({mb, sk, groups, ql, d});
  v = v.unsqueeze(3).expand({mb, sk, groups, ql, d});
  q = q.reshape({mb, s, heads, d}).transpose(1, 2);
  k = k.reshape({mb, sk, heads, d}).transpose(1, 2);
  v = v.reshape({mb, sk, heads, d}).transpose(1, 2);
  Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  Tensor o = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({mb, s, heads * d});
  return reduce_from_tp(weight_mm(o, w.proj.t()), c);
}

// Tensor-parallel SwiGLU MLP of normed input xn: fc1 [2, ffn_l, h] column-, fc2 [h, ffn_l] row-parallel.
Tensor swiglu_mlp(const Tensor& fc1, const Tensor& fc2, const ModelComms& c, const Tensor& xn) {
  Tensor xi = copy_to_tp(xn, c);
  Tensor gate = weight_mm(xi, fc1.select(0, 0).t());
  Tensor up = weight_mm(xi, fc1.select(0, 1).t());
  return reduce_from_tp(weight_mm(torch::silu(gate) * up, fc2.t()), c);
}

Tensor dense_mlp(const LayerWeights& w, const ModelComms& c, const Tensor& x) {
  return swiglu_mlp(w.fc1, w.fc2, c, rms_norm(x, w.post_norm));
}

// Top-k MoE over tokens x [T, h] (this tp rank's share), experts spread over the ep group.
Tensor moe(const LayerWeights& w, const vps::ModelSpec& spec, const ModelComms& c, const Tensor& x) {
  const std::int64_t T = x.size(0), h = x.size(1), E = spec.experts, k = spec.top_k;
  const std::int64_t ep = c.ep_size, el = E / ep;
  // The router in fp32 even with a bf16 weight (Megatron's moe_router_dtype=fp32): near-ties in
  // the top-k stay as rare as in an fp32 run.
  Tensor probs = torch::softmax(torch::matmul(x, w.router.to(torch::kFloat).t()), -1);
  auto [topv, topi] = probs.topk(k, -1);
  Tensor weights = topv / topv.sum(-1, true);
  Tensor flat_e = topi.reshape({-1});
  Tensor tok = torch::arange(T, torch::kLong).repeat_interleave(k);
  auto [sorted_e, order] = flat_e.sort(/*stable=*/true, 0, false);
  Tensor sorted_tok = tok.index_select(0, order);
  Tensor xs = x.index_select(0, sorted_tok);
  Tensor cnt = torch::bincount(sorted_e, {}, E).to(torch::kLong).contiguous();
  std::vector<std::int64_t> send_cnt(cnt.data_ptr<std::int64_t>(), cnt.data_ptr<std::int64_t>() + E);
  std::vector<std::int64_t> recv_cnt(E);  // [src rank][local expert]
  if (ep > 1) {
    std::vector<std::size_t> counts(ep, el * sizeof(std::int64_t)), offs(ep);
    for (std::int64_t j = 0; j < ep; ++j) offs[j] = j * el * sizeof(std::int64_t);
    c.ep->all_to_all(send_cnt.data(), counts, offs, recv_cnt.data(), counts, offs);
  } else {
    recv_cnt = send_cnt;
  }
  std::vector<std::int64_t> send_rows(ep, 0), recv_rows(ep, 0);
  for (std::int64_t j = 0; j < ep; ++j)
    for (std::int64_t e = 0; e < el; ++e) {
      send_rows[j] += send_cnt[j * el + e];
      recv_rows[j] += recv_cnt[j * el + e];
    }
  Tensor xr = ep > 1 ? AllToAllRows::apply(xs, send_rows, recv_rows, to_handle(c.ep)) : xs;
  // Received rows come grouped by source rank, then local expert; regroup by local expert.
  std::vector<std::int64_t> src_off(ep, 0);
  for (std::int64_t j = 1; j < ep; ++j) src_off[j] = src_off[j - 1] + recv_rows[j - 1];
  std::vector<std::int64_t> perm, expert_rows(el, 0);
  for (std::int64_t e = 0; e < el; ++e)
    for (std::int64_t j = 0; j < ep; ++j) {
      std::int64_t start = src_off[j];
      for (std::int64_t f = 0; f < e; ++f) start += recv_cnt[j * el + f];
      for (std::int64_t r = 0; r < recv_cnt[j * el + e]; ++r) perm.push_back(start + r);
      expert_rows[e] += recv_cnt[j * el + e];
    }
  const auto n = static_cast<std::int64_t>(perm.size());
  Tensor perm_t = torch::tensor(perm, torch::kLong);
  Tensor xe = xr.index_select(0, perm_t);
  std::vector<Tensor> outs;
  std::int64_t at = 0;
  for (std::int64_t e = 0; e < el; ++e) {
    if (expert_rows[e] == 0) continue;
    Tensor b = xe.narrow(0, at, expert_rows[e]);
    at += expert_rows[e];
    Tensor fc1 = w.expert_fc1.select(0, e);
    Tensor a = torch::silu(weight_mm(b, fc1.select(0, 0).t())) * weight_mm(b, fc1.select(0, 1).t());
    outs.push_back(weight_mm(a, w.expert_fc2.select(0, e).t()));
  }
  Tensor ye = outs.empty() ? xe * 0.0 : torch::cat(outs, 0);
  std::vector<std::int64_t> inv(n);
  for (std::int64_t i = 0; i < n; ++i) inv[perm[i]] = i;
  Tensor yr = ye.index_select(0, torch::tensor(inv, torch::kLong));
  Tensor yb = ep > 1 ? AllToAllRows::apply(yr, recv_rows, send_rows, to_handle(c.ep)) : yr;
  Tensor wsorted = weights.reshape({-1}).index_select(0, order);
  return torch::zeros({T, h}, x.options()).index_add(0, sorted_tok, yb * wsorted.unsqueeze(1));
}

Tensor moe_mlp(const LayerWeights& w, const vps::ModelSpec& spec, const ModelComms& c, const Tensor& x) {
  const std::int64_t mb = x.size(0), s = x.size(1), h = x.size(2);
  Tensor xn = rms_norm(x, w.post_norm);
  Tensor flat = xn.reshape({mb * s, h});
  if (c.tp_size > 1) flat = SplitRows::apply(flat, to_handle(c.tp), 0);
  if (c.etp_size > 1) flat = GatherRows::apply(flat, to_handle(c.etp), 1);
  Tensor y = moe(w, spec, c, flat);  // partial over etp: each rank ran 1/etp of the ffn rows
  if (c.etp_size > 1) y = SplitRows::apply(y, to_handle(c.etp), 1);
  if (c.tp_size > 1) y = GatherRows::apply(y, to_handle(c.tp), 0);
  y = y.view({mb, s, h});
  if (!w.shared_fc1.defined()) return y;
  Tensor shared = swiglu_mlp(w.shared_fc1, w.shared_fc2, c, xn);
  if (w.shared_gate.defined()) shared = shared * torch::sigmoid(weight_mm(xn, w.shared_gate.t()));
  return y + shared;
}

}  // namespace

Tensor embed_forward(const StageModel& m, const ModelComms& c, const Tensor& tokens) {
  const std::int64_t vl = m.embedding.size(0);
  Tensor in_range = (tokens >= m.vocab_start).logical_and(tokens < m.vocab_start + vl);
  Tensor idx = (tokens - m.vocab_start).clamp(0, vl - 1).reshape({-1});
  Tensor e = m.embedding.index_select(0, idx).view({tokens.size(0), tokens.size(1), -1});
  e = e.to(torch::kFloat) * in_range.unsqueeze(-1).to(torch::kFloat);  // fp32 activations
  return reduce_from_tp(e, c);
}

// Throws StepInterrupted when c.interrupt is raised, here and when the backward reaches x.
Tensor interruption_point(const Tensor& x, const ModelComms& c) {
  const std::atomic<bool>* flag = c.interrupt;
  if (flag == nullptr) return x;
  auto check = [flag] {
    if (flag->load(std::memory_order_relaxed))
      throw StepInterrupted("step abandoned: another process met a lost peer (job/loss_watch.h)");
  };
  check();
  if (x.requires_grad())
    x.register_hook([check](const Tensor& grad) {
      check();
      return grad;
    });
  return x;
}

Tensor layers_forward(const StageModel& m, const ModelComms& c, Tensor x) {
  const std::int64_t s = x.size(1), d = m.spec.head_dim;
  auto [cos, sin] = rope_tables(c, s, d);  // [s, d/2]
  // Causal mask [s, s * cp]: key position after query position (keys in gather_seq's order).
  Tensor mask = torch::ones({s, s}, torch::kBool).triu(1);
  if (c.cp_size > 1) {
    std::vector<std::int64_t> keys;
    for (int r = 0; r < c.cp_size; ++r)
      for (auto p : cp_positions(r, c.cp_size, s * c.cp_size)) keys.push_back(p);
    mask = torch::tensor(keys, torch::kLong).unsqueeze(0) > local_positions(c, s).to(torch::kLong).unsqueeze(1);
  }
  for (const auto& w : m.layers) {
    x = interruption_point(x, c);
    x = x + attention(w, m.spec, c, x, cos, sin, mask);
    x = x + (w.router.defined() ? moe_mlp(w, m.spec, c, x) : dense_mlp(w, c, x));
  }
  return x;
}

Tensor loss_forward(const StageModel& m, const ModelComms& c, const Tensor& x, const Tensor& targets, Tensor* logits) {
  const std::int64_t h = x.size(2);
  Tensor xi = copy_to_tp(rms_norm(x, m.final_norm), c).reshape({-1, h});
  // Vocab padding rows (if any) are not part of the model: drop their columns (all of them on a
  // rank that holds only padding; it still joins the cross-entropy's collectives).
  const std::int64_t valid = std::clamp<std::int64_t>(m.spec.vocab - m.vocab_start, 0, m.output.size(0));
  Tensor l = weight_mm(xi, m.output.narrow(0, 0, valid).t());
  if (logits) *logits = l.detach();
  return VocabParallelCrossEntropy::apply(l, targets.reshape({-1}), m.vocab_start, c.tp_size > 1 ? to_handle(c.tp) : 0);
}

}  // namespace dynatrain::train
