// One training step on this rank: the local batch's micro-batches through the stage (1F1B when
// pp > 1), gradients completed over tp where they are partial, then the optimizer
// (trainer_optimizer.cc). Invariants: the data cursor advances by one global batch per step
// and by nothing else; every rank of the layout sees the same cursor, so the data order is the
// static run's whatever the layout.
#include <algorithm>

#include "common/clock.h"
#include "common/error.h"
#include "train/context_parallel.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

int auto_micro_batches(std::int64_t local_batch, int pp, int requested) {
  if (requested > 0) return requested;
  if (pp == 1) return 1;
  int m = static_cast<int>(std::min<std::int64_t>(local_batch, 2 * pp));
  while (local_batch % m != 0) --m;
  return m;
}

void Trainer::Impl::exchange(const torch::Tensor* send, int send_peer, int send_tag, torch::Tensor* recv, int recv_peer,
                             int recv_tag) {
  std::vector<std::unique_ptr<comm::Request>> reqs;
  torch::Tensor s;
  if (recv) reqs.push_back(pp_g->irecv(recv->data_ptr<float>(), recv->numel() * sizeof(float), recv_peer, recv_tag));
  if (send) {
    s = send->detach().contiguous();
    reqs.push_back(pp_g->isend(s.data_ptr<float>(), s.numel() * sizeof(float), send_peer, send_tag));
  }
  comm::wait_all(reqs);
}

// One step's micro-batches on this stage: this dp (and cp) rank's tokens and targets, the
// stage's inputs and outputs kept from each forward until its backward, and the loss.
struct Trainer::Impl::MicroBatches {
  Impl& im;
  std::vector<float>* logits_out;  // the last stage's logits, when asked for (probe)
  torch::Tensor tokens, targets;   // [local batch, this cp rank's positions]
  std::int64_t mb = 0, s = 0;      // sequences per micro-batch, positions per sequence here
  double scale = 0;                // 1 / tokens of the global batch
  int stage = 0, stages = 1;
  bool first = false, last = false;
  std::vector<torch::Tensor> inputs, outputs, logits;
  double loss = 0;

  MicroBatches(Impl& impl, std::vector<float>* out) : im(impl), logits_out(out) {
    const auto& c = im.cfg();
    const auto& o = im.opt;
    const std::int64_t local_b = o.global_batch / c.dp;
    mb = local_b / im.micro;
    s = o.seq / c.cp;
    std::vector<std::int64_t> tok, tgt;
    sample_windows(im.text, im.cursor, im.rc.dp * local_b, local_b, o.seq, tok, tgt);
    tokens = torch::tensor(tok, torch::kLong).view({local_b, o.seq});
    targets = torch::tensor(tgt, torch::kLong).view({local_b, o.seq});
    if (c.cp > 1) {  // this cp rank's positions of every sequence
      torch::Tensor pos = torch::tensor(cp_positions(im.rc.cp, c.cp, o.seq), torch::kLong);
      tokens = tokens.index_select(1, pos);
      targets = targets.index_select(1, pos);
    }
    scale = 1.0 / static_cast<double>(o.global_batch * o.seq);
    stage = im.rc.pp;
    stages = c.pp;
    first = stage == 0;
    last = stage == stages - 1;
    inputs.resize(im.micro);
    outputs.resize(im.micro);
  }

  torch::Tensor new_act() const { return torch::empty({mb, s, im.opt.model.hidden}, torch::kFloat); }

  // Micro-batch i through the stage; `x` is the previous stage's output (unused on the first).
  torch::Tensor forward(int i, torch::Tensor x) {
    if (first) {
      x = embed_forward(im.model, im.comms, tokens.narrow(0, i * mb, mb));
    } else {
      x.requires_grad_(true);
      inputs[i] = x;
    }
    x = layers_forward(im.model, im.comms, x);
    if (!last) return outputs[i] = x;
    torch::Tensor lg;
    torch::Tensor l =
        loss_forward(im.model, im.comms, x, targets.narrow(0, i * mb, mb), logits_out ? &lg : nullptr).sum() * scale;
    if (logits_out) logits.push_back(lg);
    if (im.comms.tp_rank == 0) loss += l.item<double>();
    return outputs[i] = l;
  }

  // Backward of micro-batch i from the next stage's gradient; returns the gradient of its input.
  torch::Tensor backward(int i, const torch::Tensor& grad) {
    if (last)
      outputs[i].backward();
    else
      torch::autograd::backward({outputs[i]}, {grad});
    outputs[i] = torch::Tensor();
    torch::Tensor gx = first ? torch::Tensor() : inputs[i].grad();
    inputs[i] = torch::Tensor();
    return gx;
  }

  // Megatron's 1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards.
  void run_1f1b() {
    const int micro = im.micro, prev = stage - 1, next = stage + 1;
    auto recv_from = [&](bool skip, int peer, int tag) {
      torch::Tensor t;
      if (!skip) {
        t = new_act();
        im.exchange(nullptr, 0, 0, &t, peer, tag);
      }
      return t;
    };
    auto send_forward = [&](const torch::Tensor& y) {
      if (!last) im.exchange(&y, next, kTagForward, nullptr, 0, 0);
    };
    auto send_backward = [&](const torch::Tensor& g) {
      if (!first) im.exchange(&g, prev, kTagBackward, nullptr, 0, 0);
    };
    const int warmup = std::min(stages - stage - 1, micro), remaining = micro - warmup;
    for (int i = 0; i < warmup; ++i) send_forward(forward(i, recv_from(first, prev, kTagForward)));
    torch::Tensor x;
    if (remaining > 0) x = recv_from(first, prev, kTagForward);
    for (int i = 0; i < remaining; ++i) {
      torch::Tensor y = forward(warmup + i, x);
      torch::Tensor gy;
      if (!last) {  // send_forward_recv_backward
        gy = new_act();
        im.exchange(&y, next, kTagForward, &gy, next, kTagBackward);
      }
      torch::Tensor gx = backward(i, gy);
      if (i == remaining - 1) {
        send_backward(gx);
      } else if (!first) {  // send_backward_recv_forward
        x = new_act();
        im.exchange(&gx, prev, kTagBackward, &x, prev, kTagForward);
      } else {
        x = torch::Tensor();
      }
    }
    for (int i = remaining; i < micro; ++i) send_backward(backward(i, recv_from(last, next, kTagBackward)));
  }

  void run() {
    if (stages == 1) {
      for (int i = 0; i < im.micro; ++i) {
        forward(i, {});
        backward(i, {});
      }
    } else {
      run_1f1b();
    }
    if (logits_out && last && !logits.empty()) {
      torch::Tensor all = torch::cat(logits, 0).contiguous();
      logits_out->assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
    }
  }
};

// Forward and backward of every micro-batch (1F1B when pp > 1). Returns this rank's share of
// the summed loss (last stage, tp rank 0; 0 elsewhere).
double Trainer::Impl::run_microbatches(std::vector<float>* logits_out) {
  MicroBatches run(*this, logits_out);
  run.run();
  return run.loss;
}

// Completes gradients that are partial over tp (see tp_partial, and k/v rows of a query group
// shared by several tp ranks when tp > kv heads).
void Trainer::Impl::reduce_tp_partial_grads() {
  if (comms.tp_size <= 1) return;
  torch::NoGradGuard ng;
  for (auto& w : tp_partial) {
    torch::Tensor g = w.mutable_grad();
    tp_g->all_reduce_sum(g.data_ptr<float>(), g.numel());
  }
  const auto& m = opt.model;
  if (comms.tp_size <= m.kv_heads) return;
  const std::int64_t per_group = comms.tp_size / m.kv_heads, g = comms.tp_rank / per_group;
  // grad [1, q_l + 2, d, ...]: the k and v rows of query group g, summed over the tp ranks
  // that share the group.
  auto complete_kv_rows = [&](torch::Tensor grad) {
    const std::int64_t ql = grad.size(1) - 2;
    auto shape = grad[0].narrow(0, ql, 2).sizes().vec();
    shape.insert(shape.begin(), m.kv_heads);
    torch::Tensor buf = torch::zeros(shape);
    buf[g].copy_(grad[0].narrow(0, ql, 2));
    tp_g->all_reduce_sum(buf.data_ptr<float>(), buf.numel());
    grad[0].narrow(0, ql, 2).copy_(buf[g]);
  };
  for (auto& L : model.layers) {
    complete_kv_rows(L.qkv.mutable_grad());                                 // [1, q_l + 2, d, h]
    if (L.qkv_bias.defined()) complete_kv_rows(L.qkv_bias.mutable_grad());  // [1, q_l + 2, d]
  }
}

StepStats Trainer::Impl::do_step() {
  DT_CHECK(rc.active, "step() called on rank ", world().rank(), " outside layout ", cfg().str());
  const auto t0 = Clock::now();
  ready_update.reset();  // (one a loss left behind: the step is done again)
  updating = false;
  zero_grads();
  gather_params();
  float loss = static_cast<float>(run_microbatches(nullptr));
  reduce_tp_partial_grads();
  active_g->all_reduce_sum(&loss, 1);  // before the update: see TrainerOptions::commit_barrier
  optimizer_step(loss, t0);
  return step_done(loss, t0);
}

// The step counted: its figures, the data cursor and the step counter moved on.
StepStats Trainer::Impl::step_done(float loss, Clock::time_point t0) {
  StepStats st;
  st.step = step;
  st.loss = loss;
  cursor.position += static_cast<std::uint64_t>(opt.global_batch);
  ++step;
  st.seconds = seconds_since(t0);
  last_step_s = st.seconds;
  st.tokens_per_s = static_cast<double>(opt.global_batch * opt.seq) / st.seconds;
  return st;
}

}  // namespace dynatrain::train
