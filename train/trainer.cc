#include "train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/error.h"
#include "edm/device_manager.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "train/bf16.h"
#include "train/context_parallel.h"
#include "train/cpu_usage.h"
#include "train/data.h"
#include "train/model.h"
#include "train/zero.h"
#include "exec/engine.h"
#include "exec/pool_allocator.h"
#include "common/clock.h"

namespace dynatrain::train {

using vps::StateKind;

namespace {

constexpr int kTagForward = 101, kTagBackward = 102, kTagLogits = 104, kTagLink = 105;

const std::vector<StateKind> kMovedKinds = {StateKind::kParam, StateKind::kMaster,
                                            StateKind::kExpAvg, StateKind::kExpAvgSq};

int auto_micro_batches(std::int64_t local_batch, int pp, int requested) {
  if (requested > 0) return requested;
  if (pp == 1) return 1;
  int m = static_cast<int>(std::min<std::int64_t>(local_batch, 2 * pp));
  while (local_batch % m != 0) --m;
  return m;
}

}  // namespace

SwitchMethod default_switch_method() {
#ifdef DT_HAVE_EXEC
  return SwitchMethod::kEngine;
#else
  return SwitchMethod::kGather;
#endif
}

const char* switch_method_name(SwitchMethod m) {
  return m == SwitchMethod::kEngine ? "engine" : "gather";
}

void Trainer::check_supported(const TrainerOptions& o, vps::ParallelConfig& c) {
  const auto& m = o.model;
  m.validate();
  // Of ModelSpec::features_beyond_llama, the ones the trainer's model implements.
  static const std::set<std::string> kImplemented = {"shared experts", "dense layers among MoE layers",
                                                     "MLA attention"};
  for (const auto& extra : m.features_beyond_llama())
    if (!kImplemented.contains(extra) && !(extra == "attention biases" && m.qkv_bias && !m.proj_bias && !m.bias))
      DT_INPUT_ERROR("model '", m.name, "' has ", extra,
                     "; the reference trainer supports Llama/Qwen-style models only (RMSNorm, SwiGLU, "
                     "no biases but Qwen2's q/k/v bias, no learned positions, untied embeddings; MoE "
                     "with optional shared experts, shared-expert gate and dense layers; MLA)");
  if (m.head_dim % 2 != 0) DT_INPUT_ERROR("model '", m.name, "': head_dim=", m.head_dim, " must be even (RoPE)");
  if (m.is_mla() && m.qk_rope_dim % 2 != 0)
    DT_INPUT_ERROR("model '", m.name, "': qk_rope_head_dim=", m.qk_rope_dim, " must be even (RoPE)");
  c.validate_for(m);
  if (c.cp > 1 && o.seq % (2 * c.cp) != 0)
    DT_INPUT_ERROR("seq ", o.seq, " is not divisible by 2*cp=", 2 * c.cp, " (", c.str(),
                   "): context parallelism cuts each sequence into 2*cp equal chunks");
  if (c.tp % c.etp != 0)
    DT_INPUT_ERROR("etp=", c.etp, " does not divide tp=", c.tp, " (", c.str(),
                   "); the reference trainer's expert TP splits each tp group: valid etp divides tp");
  if (o.global_batch <= 0 || o.seq <= 0) DT_INPUT_ERROR("global batch and seq must be positive");
  if (o.global_batch % c.dp != 0)
    DT_INPUT_ERROR("global batch ", o.global_batch, " is not divisible by dp=", c.dp, " (", c.str(), ")");
  const std::int64_t local = o.global_batch / c.dp;
  const int micro = auto_micro_batches(local, c.pp, o.micro_batches);
  if (local % micro != 0)
    DT_INPUT_ERROR(micro, " micro-batches do not divide the per-dp-rank batch ", local, " (", c.str(), ")");
  if (m.is_moe() && (local / micro * (o.seq / c.cp)) % c.tp != 0)
    DT_INPUT_ERROR("MoE layers split the ", local / micro * (o.seq / c.cp), " tokens of a micro-batch over tp=",
                   c.tp, ", which does not divide them");
}

// A switch being prepared: what the EDM's thread computed for this rank (no communication).
struct PendingSwitch {
  vps::ParallelConfig next;
  std::unique_ptr<vps::Layout> dst_full;  // every state kind of the new layout
  vps::RankLayout dst_full_rl, src_rl, dst_rl;
  plan::RankPlan plan;                    // this rank's part (moved kinds only)
  plan::Placement placement;              // process (transition world rank) of every new rank
  int new_rank = -1;                      // this process's rank in the new layout (-1: none)
  std::size_t prefaulted = 0;             // bytes the prepare touched in the pool
  std::uint64_t chunk_bytes = 0;          // the engine's chunk in the commit (exchange probe)
  double plan_s = 0;
};

struct Trainer::Impl {
  TrainerOptions opt;
  std::unique_ptr<edm::DeviceManager> edm;
  std::string text;
  DataCursor cursor;
  std::int64_t step = 0;

  std::unique_ptr<vps::Layout> layout;
  vps::RankLayout rank_layout;
  vps::RankCoords rc;
  // Every state block comes from this pool (declared before the arenas: it outlives them), so
  // a switch builds the destination in the memory the source gives back as it drains.
  exec::PoolAllocator pool;
  Arenas arenas;
  // ZeRO-2/3: full-bucket working copies of the sharded param / grad buffers (zero.h).
  ZeroWork zero_work;
  // Groups of the current layout, from the EDM's cache (nullptr on ranks outside it).
  std::shared_ptr<const edm::Communicators> groups;
  // Expert TP: etp consecutive ranks of the tp group (etp divides tp); nullptr when etp = 1.
  comm::Transport* etp_g = nullptr;
  // Context parallel: the cp group, and the dp x cp group that shards and reduces dense state
  // (index cp_rank + cp * dp_rank); dpcp_g is nullptr when cp = 1. All from the EDM's cache.
  comm::Transport* cp_g = nullptr;
  comm::Transport* dpcp_g = nullptr;
  comm::Transport* tp_g = nullptr, *dp_g = nullptr, *pp_g = nullptr, *ep_g = nullptr,
                 *edp_g = nullptr, *active_g = nullptr;
  std::unique_ptr<PendingSwitch> pending;
  bool left = false;
  int layout_rank = 0;       // this process's rank in the current layout (>= its size: none)
  bool grads_stale = false;  // gradient buffers hold garbage since the last commit (until zeroed)
  // Agreed at every commit (rank 0's choice). Before the first prepare has been measured: 20
  // steps, a constant so that every rank prepares at the same step. Starting processes can take
  // seconds on a loaded machine (2.3 s, 14 steps of the demo's 160 ms, in one run); preparing
  // early only holds the prefaulted memory longer, preparing late shows in the pause.
  int lookahead = 20;
  int lookahead_used = 0;
  double last_step_s = 0;
  StageModel model;
  ModelComms comms;
  std::vector<std::int64_t> stage_offsets;
  int micro = 1;

  // Tensors whose gradient is partial over tp: q_norm, k_norm and MLA's down projections and
  // their norms (local heads only) and the router (tokens split over tp in MoE layers).
  std::vector<torch::Tensor> tp_partial;

  Impl(TrainerOptions o, std::string t) : opt(std::move(o)), text(std::move(t)) {
    cursor.seed = opt.seed;
    if (opt.lookahead > 0) lookahead = opt.lookahead;
  }

  comm::Transport& world() { return edm->world(); }
  // Element size of every state kind (fp32, or bf16 params with --bf16).
  vps::ElemBytes elem() const { return trainer_elem_bytes(opt.bf16); }

  const vps::ParallelConfig& cfg() const { return layout->config(); }
  bool active() const { return rc.active; }

  // ---- one layout's groups: handed out by the EDM (edm/communicators.h) ----
  void use_groups(std::shared_ptr<const edm::Communicators> g) {
    groups = std::move(g);
    const bool a = rc.active;
    DT_CHECK(a == (groups != nullptr), "rank ", world().rank(), " active=", a, " but groups ",
             groups ? "present" : "absent", " for ", cfg().str());
    auto get = [&](edm::Group k) { return a ? &groups->group(k) : nullptr; };
    tp_g = get(edm::Group::kTp);
    dp_g = get(edm::Group::kDp);
    pp_g = get(edm::Group::kPp);
    ep_g = get(edm::Group::kEp);
    edp_g = get(edm::Group::kEdp);
    active_g = get(edm::Group::kActive);
    comms = {};
    if (a) {
      comms.tp = tp_g->size() > 1 ? tp_g : nullptr;
      comms.tp_size = tp_g->size();
      comms.tp_rank = tp_g->rank();
      comms.ep = ep_g->size() > 1 ? ep_g : nullptr;
      comms.ep_size = ep_g->size();
      comms.ep_rank = ep_g->rank();
      const int etp = cfg().etp;
      etp_g = groups->has(edm::Group::kEtp) ? &groups->group(edm::Group::kEtp) : nullptr;
      DT_CHECK((etp_g != nullptr) == (etp > 1), "etp=", etp, " but the EDM's groups ", etp_g ? "have" : "lack", " an etp group");
      comms.etp = etp_g;
      comms.etp_size = etp;
      const auto& c = cfg();
      cp_g = &groups->group(edm::Group::kCp);
      dpcp_g = groups->has(edm::Group::kDpCp) ? &groups->group(edm::Group::kDpCp) : nullptr;
      comms.cp = c.cp > 1 ? cp_g : nullptr;
      comms.cp_size = c.cp;
      comms.cp_rank = rc.cp;
    } else {
      etp_g = nullptr;
      cp_g = nullptr;
      dpcp_g = nullptr;
    }
  }

  const vps::LocalBuffer& buffer(StateKind kind, bool expert, std::int32_t bucket) const {
    for (const auto& b : rank_layout.buffers)
      if (b.kind == kind && b.expert_group == expert && b.bucket == bucket) return b;
    DT_CHECK(false, "no ", vps::state_kind_name(kind), " buffer for bucket ", bucket);
    throw;  // unreachable
  }

  // Local modules as views of the param arena; their .grad as views of the grad arena.
  void build_views() {
    model = StageModel{};
    tp_partial.clear();
    if (!rc.active) return;
    const auto& c = cfg();
    model.spec = layout->model();
    model.first = rc.pp == 0;
    model.last = rc.pp == c.pp - 1;
    stage_offsets = vps::stage_layer_offsets(c);
    const std::int64_t first_layer = stage_offsets[rc.pp];
    model.layers.resize(stage_offsets[rc.pp + 1] - first_layer);
    micro = auto_micro_batches(opt.global_batch / c.dp, c.pp, opt.micro_batches);
    const auto& tensors = layout->tensors();
    for (const auto& s : layout->local_shards(layout_rank)) {
      const auto& t = tensors[s.tensor];
      const auto& pb = buffer(StateKind::kParam, s.expert_group, s.bucket);
      const auto& gb = buffer(StateKind::kGrad, s.expert_group, s.bucket);
      // The weight in the param kind's type (bf16 with --bf16); its .grad always fp32: autograd
      // adds each micro-batch's gradient into it (a bf16 one widened), Megatron's main_grad.
      const int pe = arenas.elem_bytes(StateKind::kParam);
      auto popts = torch::TensorOptions().dtype(pe == 2 ? torch::kBFloat16 : torch::kFloat);
      torch::Tensor w = torch::from_blob(zero_work.full_bytes(StateKind::kParam, pb, arenas) + s.offset * pe,
                                         s.local_shape, popts);
      w.requires_grad_(true);
      w.mutable_grad() = torch::from_blob(zero_work.full(StateKind::kGrad, gb, arenas) + s.offset, s.local_shape,
                                          torch::TensorOptions().dtype(torch::kFloat));
      const std::string& n = t.name;
      if (n == "embedding.word.weight") {
        model.embedding = w;
        model.vocab_start = s.boxes.empty() ? t.shape[0] : s.boxes[0].lo[0];
      } else if (n == "final_norm.weight") {
        model.final_norm = w;
      } else if (n == "output.weight") {
        model.output = w;
        model.vocab_start = s.boxes.empty() ? t.shape[0] : s.boxes[0].lo[0];
      } else if (t.stage == vps::Stage::kLayer) {
        auto& L = model.layers.at(t.layer - first_layer);
        const std::string suffix = n.substr(n.find('.', 7) + 1);
        if (suffix == "input_norm.weight") L.input_norm = w;
        else if (suffix == "attn.qkv.weight") L.qkv = w;
        else if (suffix == "attn.qkv.bias") L.qkv_bias = w;
        else if (suffix == "attn.q_norm.weight") L.q_norm = w;
        else if (suffix == "attn.k_norm.weight") L.k_norm = w;
        else if (suffix == "attn.proj.weight") L.proj = w;
        else if (suffix == "attn.q_down.weight") L.q_down = w;
        else if (suffix == "attn.q_down_norm.weight") L.q_down_norm = w;
        else if (suffix == "attn.q_up.weight") L.q_up = w;
        else if (suffix == "attn.q.weight") L.q = w;
        else if (suffix == "attn.kv_down.weight") L.kv_down = w;
        else if (suffix == "attn.kv_down_norm.weight") L.kv_down_norm = w;
        else if (suffix == "attn.kv_up.weight") L.kv_up = w;
        else if (suffix == "post_attn_norm.weight") L.post_norm = w;
        else if (suffix == "mlp.fc1.weight") L.fc1 = w;
        else if (suffix == "mlp.fc2.weight") L.fc2 = w;
        else if (suffix == "mlp.router.weight") L.router = w;
        else if (suffix == "mlp.experts.fc1.weight") L.expert_fc1 = w;
        else if (suffix == "mlp.experts.fc2.weight") L.expert_fc2 = w;
        else if (suffix == "mlp.shared.fc1.weight") L.shared_fc1 = w;
        else if (suffix == "mlp.shared.fc2.weight") L.shared_fc2 = w;
        else if (suffix == "mlp.shared.gate.weight") L.shared_gate = w;
        else DT_CHECK(false, "unexpected tensor ", n);
        if (suffix.find("q_norm") != std::string::npos || suffix.find("k_norm") != std::string::npos ||
            suffix.find("router") != std::string::npos || suffix.find("_down") != std::string::npos)
          tp_partial.push_back(w);
      } else {
        DT_CHECK(false, "unexpected tensor ", n);
      }
    }
  }

  // `prepared`: this rank's layout of `l` when already computed (a switch's prepare).
  // `rank`: this process's rank in `l` when it differs from its world rank (a commit, before
  // the new world is adopted; -1: none, so outside the layout).
  void adopt(std::unique_ptr<vps::Layout> l, Arenas a, std::shared_ptr<const edm::Communicators> g,
             vps::RankLayout* prepared = nullptr, int rank = -2) {
    model = StageModel{};  // drop views of the old arenas first
    layout = std::move(l);
    const int r = rank == -2 ? world().rank() : rank == -1 ? layout->config().world_size() + world().rank() : rank;
    layout_rank = r;
    rank_layout = prepared ? std::move(*prepared) : layout->rank_layout(r);
    rc = vps::rank_coords(layout->config(), r);
    arenas = std::move(a);
    use_groups(std::move(g));
    if (rc.active) zero_work.reset(rank_layout, cfg().zero, shard_group(false)->size(), edp_g->size(), elem());
    else zero_work = ZeroWork{};
    build_views();
  }

  std::unique_ptr<vps::Layout> make_layout(const vps::ParallelConfig& c,
                                           std::vector<StateKind> kinds = {
                                               StateKind::kParam, StateKind::kGrad, StateKind::kMaster,
                                               StateKind::kExpAvg, StateKind::kExpAvgSq}) const {
    vps::LayoutOptions lo = trainer_layout_options(opt.bucket_elems, std::move(kinds), opt.bf16);
    if (opt.align_pages) lo.align_elems = vps::kPageAlignElems;
    return std::make_unique<vps::Layout>(opt.model, c, lo);
  }

  // ---- one step ----
  void exchange(const torch::Tensor* send, int send_peer, int send_tag, torch::Tensor* recv,
                int recv_peer, int recv_tag) {
    std::vector<std::unique_ptr<comm::Request>> reqs;
    torch::Tensor s;
    if (recv) reqs.push_back(pp_g->irecv(recv->data_ptr<float>(), recv->numel() * sizeof(float), recv_peer, recv_tag));
    if (send) {
      s = send->detach().contiguous();
      reqs.push_back(pp_g->isend(s.data_ptr<float>(), s.numel() * sizeof(float), send_peer, send_tag));
    }
    comm::wait_all(reqs);
  }

  // Forward and backward of every micro-batch (1F1B when pp > 1). Returns this rank's share of
  // the summed loss (last stage, tp rank 0; 0 elsewhere).
  double run_microbatches(std::vector<float>* logits_out) {
    const auto& c = cfg();
    const std::int64_t local_b = opt.global_batch / c.dp, mb = local_b / micro, s = opt.seq / c.cp;
    const std::int64_t h = opt.model.hidden;
    std::vector<std::int64_t> tok, tgt;
    sample_windows(text, cursor, rc.dp * local_b, local_b, opt.seq, tok, tgt);
    torch::Tensor tokens = torch::tensor(tok, torch::kLong).view({local_b, opt.seq});
    torch::Tensor targets = torch::tensor(tgt, torch::kLong).view({local_b, opt.seq});
    if (c.cp > 1) {  // this cp rank's positions of every sequence
      torch::Tensor pos = torch::tensor(cp_positions(rc.cp, c.cp, opt.seq), torch::kLong);
      tokens = tokens.index_select(1, pos);
      targets = targets.index_select(1, pos);
    }
    const double scale = 1.0 / static_cast<double>(opt.global_batch * opt.seq);
    const int stage = rc.pp, stages = c.pp;
    const bool first = stage == 0, last = stage == stages - 1;
    std::vector<torch::Tensor> inputs(micro), outputs(micro), logits;
    double loss = 0;

    auto new_act = [&] { return torch::empty({mb, s, h}, torch::kFloat); };
    auto forward = [&](int i, torch::Tensor x) {
      if (first) {
        x = embed_forward(model, comms, tokens.narrow(0, i * mb, mb));
      } else {
        x.requires_grad_(true);
        inputs[i] = x;
      }
      x = layers_forward(model, comms, x);
      if (last) {
        torch::Tensor lg;
        torch::Tensor l = loss_forward(model, comms, x, targets.narrow(0, i * mb, mb),
                                       logits_out ? &lg : nullptr).sum() * scale;
        if (logits_out) logits.push_back(lg);
        if (comms.tp_rank == 0) loss += l.item<double>();
        outputs[i] = l;
      } else {
        outputs[i] = x;
      }
      return outputs[i];
    };
    auto backward = [&](int i, const torch::Tensor& grad) {
      if (last) outputs[i].backward();
      else torch::autograd::backward({outputs[i]}, {grad});
      outputs[i] = torch::Tensor();
      torch::Tensor gx = first ? torch::Tensor() : inputs[i].grad();
      inputs[i] = torch::Tensor();
      return gx;
    };

    if (stages == 1) {
      for (int i = 0; i < micro; ++i) {
        forward(i, {});
        backward(i, {});
      }
    } else {
      const int prev = stage - 1, next = stage + 1;
      auto recv_forward = [&] {
        torch::Tensor x;
        if (!first) { x = new_act(); exchange(nullptr, 0, 0, &x, prev, kTagForward); }
        return x;
      };
      auto send_forward = [&](const torch::Tensor& y) {
        if (!last) exchange(&y, next, kTagForward, nullptr, 0, 0);
      };
      auto recv_backward = [&] {
        torch::Tensor g;
        if (!last) { g = new_act(); exchange(nullptr, 0, 0, &g, next, kTagBackward); }
        return g;
      };
      auto send_backward = [&](const torch::Tensor& g) {
        if (!first) exchange(&g, prev, kTagBackward, nullptr, 0, 0);
      };
      const int warmup = std::min(stages - stage - 1, micro), remaining = micro - warmup;
      for (int i = 0; i < warmup; ++i) send_forward(forward(i, recv_forward()));
      torch::Tensor x;
      if (remaining > 0) x = recv_forward();
      for (int i = 0; i < remaining; ++i) {
        torch::Tensor y = forward(warmup + i, x);
        torch::Tensor gy;
        if (!last) {  // send_forward_recv_backward
          gy = new_act();
          exchange(&y, next, kTagForward, &gy, next, kTagBackward);
        }
        torch::Tensor gx = backward(i, gy);
        if (i == remaining - 1) {
          send_backward(gx);
        } else if (!first) {  // send_backward_recv_forward
          x = new_act();
          exchange(&gx, prev, kTagBackward, &x, prev, kTagForward);
        } else {
          x = torch::Tensor();
        }
      }
      for (int i = remaining; i < micro; ++i) send_backward(backward(i, recv_backward()));
    }
    if (logits_out && last && !logits.empty()) {
      torch::Tensor all = torch::cat(logits, 0).contiguous();
      logits_out->assign(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
    }
    return loss;
  }

  // Completes gradients that are partial over tp (see tp_partial, and k/v rows of a query group
  // shared by several tp ranks when tp > kv heads).
  void reduce_tp_partial_grads() {
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
      complete_kv_rows(L.qkv.mutable_grad());  // [1, q_l + 2, d, h]
      if (L.qkv_bias.defined()) complete_kv_rows(L.qkv_bias.mutable_grad());  // [1, q_l + 2, d]
    }
  }

  comm::Transport* shard_group(bool expert) { return expert ? edp_g : dpcp_g ? dpcp_g : dp_g; }

  void zero_kind(StateKind kind) {
    for (const auto& b : rank_layout.buffers)
      if (b.kind == kind && b.numel > 0) std::memset(arenas.bytes(b), 0, arenas.block_bytes(b));
  }

  void adam(float* master, float* m, float* v, const float* g, std::int64_t n) const {
    const double t = static_cast<double>(step + 1);
    const double lr = opt.lr * std::min(1.0, t / static_cast<double>(std::max<std::int64_t>(opt.warmup_steps, 1)));
    const float b1 = static_cast<float>(opt.beta1), b2 = static_cast<float>(opt.beta2);
    const float bc1 = static_cast<float>(1.0 - std::pow(opt.beta1, t));
    const float bc2 = static_cast<float>(1.0 - std::pow(opt.beta2, t));
    const float step_size = static_cast<float>(lr) / bc1, eps = static_cast<float>(opt.eps);
    for (std::int64_t i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      master[i] -= step_size * m[i] / (std::sqrt(v[i] / bc2) + eps);
    }
  }

  // Gradients to zero before a backward: the grad state buffers and the working copies that
  // autograd accumulates into at zero >= 2.
  void zero_grads() {
    zero_kind(StateKind::kGrad);
    zero_work.zero_grads();
  }

  // ZeRO-3: each param bucket all-gathered from its shards into the working copy the model
  // computes on (the whole stage at once, before the forward). No-op below zero=3.
  void gather_params() {
    if (cfg().zero < 3) return;
    for (const auto& pb : rank_layout.buffers)
      if (pb.kind == StateKind::kParam)
        all_gather_bytes_or_copy(*shard_group(pb.expert_group), arenas.bytes(pb),
                                 zero_work.full_bytes(StateKind::kParam, pb, arenas), arenas.block_bytes(pb));
  }

  // Per bucket, over its shard group (dp for dense buckets, edp for expert buckets):
  //   ZeRO-0: all-reduce the grads, Adam on the full bucket, params = master;
  //   ZeRO-1: reduce-scatter the grads into a scratch shard, Adam on the shard, all-gather the
  //           params from the master shards;
  //   ZeRO-2: the same, reduce-scattered into the grad state shard (kept: gather(kGrad) reads it);
  //   ZeRO-3: the same, and the param state shard = master shard (no all-gather: the next
  //           forward gathers, gather_params()).
  // "params = master" is a copy in fp32 and a rounding to bf16 with --bf16 (at ZeRO-1/2 the
  // rounded shard is what the all-gather moves: half the bytes).
  void optimizer_step() {
    const int zero = cfg().zero;
    std::vector<float> scratch;
    std::vector<std::uint16_t> scratch16;
    auto params_from_master = [&](const float* master, std::byte* param, std::int64_t n) {
      if (opt.bf16) to_bf16(master, reinterpret_cast<std::uint16_t*>(param), n);
      else std::memcpy(param, master, static_cast<std::size_t>(n) * sizeof(float));
    };
    for (const auto& pb : rank_layout.buffers) {
      if (pb.kind != StateKind::kParam) continue;
      const auto& gb = buffer(StateKind::kGrad, pb.expert_group, pb.bucket);
      const auto& mb = buffer(StateKind::kMaster, pb.expert_group, pb.bucket);
      const auto& ab = buffer(StateKind::kExpAvg, pb.expert_group, pb.bucket);
      const auto& sb = buffer(StateKind::kExpAvgSq, pb.expert_group, pb.bucket);
      comm::Transport* group = shard_group(pb.expert_group);
      std::byte* param = arenas.bytes(pb);
      float* grad = zero_work.full(StateKind::kGrad, gb, arenas);  // the full bucket's gradient
      float* master = arenas.data(mb);
      float* m = arenas.data(ab);
      float* v = arenas.data(sb);
      if (zero == 0) {
        DT_CHECK_EQ(mb.numel, pb.numel);
        if (group->size() > 1) group->all_reduce_sum(grad, pb.numel);
        adam(master, m, v, grad, pb.numel);
        params_from_master(master, param, pb.numel);
        continue;
      }
      const std::int64_t shard = mb.numel;
      float* shard_grad = arenas.data(gb);
      if (zero < 2) {
        scratch.resize(shard);
        shard_grad = scratch.data();
      }
      reduce_scatter_or_copy(*group, grad, shard_grad, shard);
      adam(master, m, v, shard_grad, shard);
      if (zero >= 3) {
        params_from_master(master, param, shard);
      } else if (opt.bf16) {
        scratch16.resize(shard);
        to_bf16(master, scratch16.data(), shard);
        all_gather_bytes_or_copy(*group, scratch16.data(), param, static_cast<std::size_t>(shard) * 2);
      } else {
        all_gather_or_copy(*group, master, reinterpret_cast<float*>(param), shard);
      }
    }
  }

  StepStats do_step() {
    DT_CHECK(rc.active, "step() called on rank ", world().rank(), " outside layout ", cfg().str());
    const auto t0 = Clock::now();
    zero_grads();
    gather_params();
    float loss = static_cast<float>(run_microbatches(nullptr));
    reduce_tp_partial_grads();
    optimizer_step();
    active_g->all_reduce_sum(&loss, 1);
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

  // ---- switch: prepare (on the EDM's thread, while steps run) + commit (at a step boundary) ----
  void prepare(vps::ParallelConfig next, std::string payload, std::vector<int> vacate) {
    check_supported(opt, next);
    for (int v : vacate)
      if (v < 0 || v >= world().size())
        DT_INPUT_ERROR("cannot vacate rank ", v, ": valid ranks are 0..", world().size() - 1);
    if (opt.switch_method != SwitchMethod::kEngine && !vacate.empty())
      DT_INPUT_ERROR("vacating processes needs the engine switch method");
    lookahead_used = lookahead;
    const vps::ParallelConfig current = cfg();
    edm->prepare(current, next, [this, current, next](const edm::Prepared& p) {
      if (p.refused.empty()) plan_switch(current, next, plan::Placement(p.process_of_rank));
    }, std::move(payload), place(current, next, vacate), vacate);
  }

  // The EDM's placement callback (runs on its thread on every rank, same answer everywhere).
  edm::DeviceManager::Place place(const vps::ParallelConfig& current, const vps::ParallelConfig& next,
                                  const std::vector<int>& vacate) const {
    if (!vacate.empty())
      return [ranks = next.world_size(), vacate](int processes) { return plan::place_around(ranks, processes, vacate); };
    if (opt.placement != TrainerOptions::Placement::kAuto || opt.switch_method != SwitchMethod::kEngine) return {};
    return [this, current, next](int processes) -> std::vector<int> {
      auto src = make_layout(current, kMovedKinds);
      auto dst = make_layout(next, kMovedKinds);
      if (processes != std::max(current.world_size(), next.world_size())) return {};
      plan::Topology topo;
      topo.gpus_per_node = opt.gpus_per_node;
      // Rank 0 stays on process 0 (the job's leader moves only when a request vacates it); the
      // other ranks are placed around it.
      const plan::Placement chosen = plan::auto_placement(*src, *dst, topo, {}, {}, {}, /*rank0_on_process0=*/true);
      DT_CHECK(chosen.process_of(0) == 0, "auto placement moved rank 0 to process ", chosen.process_of(0));
      return chosen.processes_of(next.world_size());
    };
  }

  // This rank's layouts and plan for the switch (no communication, no torch: safe on the EDM's
  // thread while the caller trains; the current layout does not change until the commit).
  void plan_switch(const vps::ParallelConfig& current, const vps::ParallelConfig& next, plan::Placement placement) {
    const auto t0 = Clock::now();
    auto ps = std::make_unique<PendingSwitch>();
    // This process's rank in the transition world: in the current world, a process keeps its
    // index in the world a grow merges; the new layout's ranks sit where `placement` says.
    const int r = world().rank();
    ps->next = next;
    ps->placement = placement;
    ps->new_rank = placement.is_identity() ? r : placement.rank_of(r, next.world_size());
    ps->dst_full = make_layout(next);
    // A process without a new rank holds nothing (a rank index beyond the layout).
    ps->dst_full_rl = ps->dst_full->rank_layout(ps->new_rank >= 0 ? ps->new_rank : next.world_size() + r);
    ps->plan.rank = r;
    if (opt.switch_method == SwitchMethod::kEngine) {
      auto src = make_layout(current, kMovedKinds);
      auto dst = make_layout(next, kMovedKinds);
      plan::Topology topo;
      topo.gpus_per_node = opt.gpus_per_node;
      plan::Planner planner(*src, *dst, topo, {{}, placement});
      if (r < planner.world_size()) {
        ps->plan = planner.plan_rank(r);
        ps->src_rl = planner.src_rank_layout(r);
        ps->dst_rl = planner.dst_rank_layout(r);
      } else {
        ps->src_rl = src->rank_layout(r);
        ps->dst_rl = dst->rank_layout(r);
      }
    }
    // The memory the commit needs beyond what the source gives back, touched now so that the
    // commit never faults fresh pages: max(0, destination - source) + staging (the budget, or
    // less when this rank moves less).
    std::uint64_t moved = 0;
    for (const auto* side : {&ps->plan.send, &ps->plan.recv})
      for (const auto& [peer, pieces] : *side)
        for (const auto& piece : pieces)
          moved += static_cast<std::uint64_t>(piece.box.numel()) * elem()[static_cast<int>(piece.kind)];
    const std::size_t src = state_bytes(rank_layout, elem()), dst = state_bytes(ps->dst_full_rl, elem());
    const std::size_t staging = std::min<std::size_t>(exec::TransitionOptions{}.mem_budget, moved);
    ps->prefaulted = pool.prefault((dst > src ? dst - src : 0) + staging);
    ps->plan_s = seconds_since(t0);
    pending = std::move(ps);
  }

  // Rank 0's choice, agreed in the commit: enough steps for the last prepare, with a 50 %
  // margin, to finish behind training, plus one.
  int choose_lookahead(double prepare_s) const {
    if (opt.lookahead > 0) return opt.lookahead;
    const double step_s = std::max(last_step_s, 1e-4);
    return static_cast<int>(std::clamp(std::ceil(1.5 * prepare_s / step_s) + 1.0, 1.0, 1000.0));
  }

  SwitchStats commit(std::string leader_state) {
    edm::Prepared& p = edm->wait_prepared();
    SwitchStats st;
    st.from = cfg().str();
    st.to = p.config.str();
    st.method = opt.switch_method;
    st.world_before = p.world_before;
    st.world_after = p.world_before;
    st.lookahead = lookahead_used;
    if (!p.refused.empty()) {  // decided by rank 0 for everybody: nobody moves anything
      st.refused = p.refused;
      edm->discard();
      pending.reset();
      return st;
    }
    DT_CHECK(pending != nullptr, "commit() without a prepared plan");
    st.note = p.note;
    st.world_after = p.world_after;
    comm::Transport& tw = edm->transition_world();
    const int current_world = cfg().world_size();
    if (tw.rank() >= current_world) edm::DeviceManager::wait_for_root(tw, edm::Wake::kCommit);
    else edm::DeviceManager::wake_from(tw, current_world, edm::Wake::kCommit);
    const auto t0 = Clock::now();
    const CpuUsage cpu0 = CpuUsage::now();
    // Step counter, data cursor (the data order), the next look-ahead, the world's size before
    // the switch (processes started by it count the merged world) and this switch's look-ahead
    // (processes started by it did not prepare it) from rank 0, which every layout holds.
    std::uint64_t carry[6] = {static_cast<std::uint64_t>(step), cursor.seed, cursor.position,
                              static_cast<std::uint64_t>(choose_lookahead(p.seconds)),
                              static_cast<std::uint64_t>(p.world_before), static_cast<std::uint64_t>(lookahead_used)};
    tw.broadcast(carry, sizeof(carry), 0);
    SwitchStats::Phases ph;
    step = static_cast<std::int64_t>(carry[0]);
    cursor.seed = carry[1];
    cursor.position = carry[2];
    lookahead = static_cast<int>(carry[3]);
    st.world_before = static_cast<int>(carry[4]);
    st.lookahead = static_cast<int>(carry[5]);
    // The job's leader (world rank 0) moves when the placement gives rank 0 to another
    // process: the caller's leader state goes along, to every rank of the transition world.
    if (!p.process_of_rank.empty() && p.process_of_rank[0] != 0) {
      comm::broadcast_string(tw, leader_state);
      st.leader_state = std::move(leader_state);
      st.leader_moved = true;
    }
    ph.carry = seconds_since(t0);
    model = StageModel{};  // no module may hold the old arenas past this point

    // Memory: everything below comes from the pool. Gradients are zero at a step boundary and
    // do not move: the old ones go back first, the new ones are made last.
    const std::size_t src_bytes = state_bytes(rank_layout, elem()), dst_bytes = state_bytes(pending->dst_full_rl, elem());
    pool.reset_peaks();
    const std::size_t fresh_before = pool.fresh_bytes();
    for (const auto& b : rank_layout.buffers)
      if (b.kind == StateKind::kGrad) arenas.release(b);
    Arenas next_arenas(pool, elem());
    double transfer_s = 0;
    std::uint64_t sent = 0, received = 0;
    std::array<std::uint64_t, 3> kept{};
    std::size_t budget = 0;
    if (opt.switch_method == SwitchMethod::kEngine) {
      budget = run_engine(tw, next_arenas, transfer_s, sent, received, ph, kept);
    } else {
      const auto tt0 = Clock::now();
      next_arenas.fill_missing(pending->dst_full_rl);
      for (StateKind kind : kMovedKinds) {
        Gathered g = gather_vps(*layout, kind, arenas, tw);
        std::vector<std::vector<float>> full(layout->tensors().size());
        for (const auto& t : layout->tensors()) {
          full[t.id] = tw.rank() == 0 ? std::move(g.tensors[t.id]) : std::vector<float>(t.numel());
          tw.broadcast(full[t.id].data(), full[t.id].size() * sizeof(float), 0);
        }
        scatter_vps(*pending->dst_full, pending->dst_full_rl, kind, full, next_arenas);
      }
      transfer_s = seconds_since(tt0);
    }
    const auto tr0 = Clock::now();
    arenas = Arenas{};  // whatever the engine did not take (nothing, for moved kinds)
    ph.free = seconds_since(tr0);
    auto tg0 = Clock::now();
    take_gradients(next_arenas);
    ph.grads = seconds_since(tg0);
    tg0 = Clock::now();
    st.placement = pending->placement.str();
    adopt(std::move(pending->dst_full), std::move(next_arenas), p.comms, &pending->dst_full_rl, pending->new_rank);
    ph.views = seconds_since(tg0);
    const std::uint64_t peak = pool.peak_live(), bound = std::max(src_bytes, dst_bytes) + budget;
    const std::uint64_t fresh = pool.fresh_bytes() - fresh_before;
    if (opt.fault_drop_moments_on_switch)
      for (StateKind k : {StateKind::kExpAvg, StateKind::kExpAvgSq}) zero_kind(k);
    const double rebuild_s = seconds_since(tr0);
    const double total_s = seconds_since(t0);
    const CpuUsage cpu = CpuUsage::now().since(cpu0);
    const double hidden = p.seconds > 0 ? p.hidden_seconds / p.seconds : 1.0;
    // Every rank's figures of this commit in one gather, folded into `st` (max of timings, min of
    // hidden, sum and max of bytes).
    CommitFigures mine;
    mine.plan_s = pending->plan_s;
    mine.transfer_s = transfer_s;
    mine.rebuild_s = rebuild_s;
    mine.total_s = total_s;
    mine.prepare_s = p.seconds;
    mine.hidden = hidden;
    mine.spawn_s = p.spawn_seconds;
    mine.phases = ph;
    mine.creations = p.creations;
    mine.sent = sent;
    mine.received = received;
    mine.peak = peak;
    mine.bound = bound;
    mine.fresh = fresh;
    mine.prefaulted = pending->prefaulted;
    mine.job_id = opt.launcher ? opt.launcher->job_id() : 0;
    mine.kept = kept;
    mine.cpu = cpu;
    // The commit's start on the machine's monotonic clock (one clock for every process of a node).
    mine.start = std::chrono::duration<double>(t0.time_since_epoch()).count();
    const std::vector<CommitFigures> all = comm::all_gather_values(tw, mine);
    fold_commit_figures(all, st);
    if (opt.measure_link) measure_link(tw, all, st);
    if (opt.measure_link && opt.measure_exchange) measure_exchange(tw, st);
    pending.reset();
    edm->adopt();
    left = edm->left();
    return st;
  }

  // The new layout's gradient buffers, from the pool and not zeroed: every step starts by
  // zeroing them, and the readers between steps (gather, arenas) zero them first
  // (grads_stale), so the pause does not pay for a second memset of every gradient.
  void take_gradients(Arenas& next_arenas) {
    for (const auto& b : pending->dst_full_rl.buffers)
      if (b.kind == StateKind::kGrad && b.numel > 0 && next_arenas.bytes(b) == nullptr)
        next_arenas.set(b, pool.allocate(next_arenas.block_bytes(b)));
    next_arenas.fill_missing(pending->dst_full_rl);  // any other buffer the engine did not make, zero
    grads_stale = true;
  }
  void zero_stale_gradients() {
    if (grads_stale && rc.active) zero_kind(StateKind::kGrad);
    grads_stale = false;
  }

  // One rank's figures of a commit, gathered from every rank in one collective.
  struct CommitFigures {
    double plan_s = 0, transfer_s = 0, rebuild_s = 0, total_s = 0, prepare_s = 0, hidden = 1, spawn_s = 0;
    double start = 0;  // the commit's start on the monotonic clock
    SwitchStats::Phases phases;
    CpuUsage cpu;
    std::uint64_t creations = 0, sent = 0, received = 0, peak = 0, bound = 0, fresh = 0, prefaulted = 0, job_id = 0;
    std::array<std::uint64_t, 3> kept{};  // kept, of which remapped, of which zero-copy
  };
  static_assert(std::is_trivially_copyable_v<CommitFigures>);

  // Max of the timings and phases, min of the hidden share, sum and max of the bytes.
  static void fold_commit_figures(const std::vector<CommitFigures>& all, SwitchStats& st) {
    st.hidden_fraction = 1;
    double first_start = 1e300, last_start = 0;
    for (const CommitFigures& f : all) {
      st.plan_s = std::max(st.plan_s, f.plan_s);
      st.transfer_s = std::max(st.transfer_s, f.transfer_s);
      st.rebuild_s = std::max(st.rebuild_s, f.rebuild_s);
      st.total_s = std::max(st.total_s, f.total_s);
      st.prepare_s = std::max(st.prepare_s, f.prepare_s);
      st.hidden_fraction = std::min(st.hidden_fraction, f.hidden);
      st.spawn_s = std::max(st.spawn_s, f.spawn_s);
      st.comm_creations = std::max(st.comm_creations, f.creations);
      auto& ph = st.phases;
      const auto& fp = f.phases;
      for (auto [out, in] : {std::pair{&ph.carry, fp.carry}, {&ph.engine_pack, fp.engine_pack},
                             {&ph.engine_unpack, fp.engine_unpack}, {&ph.engine_keep, fp.engine_keep},
                             {&ph.engine_wait, fp.engine_wait}, {&ph.engine_alloc, fp.engine_alloc},
                             {&ph.engine_agree, fp.engine_agree}, {&ph.free, fp.free}, {&ph.grads, fp.grads},
                             {&ph.views, fp.views}})
        *out = std::max(*out, in);
      st.bytes_sent += f.sent;
      st.bytes_received += f.received;
      st.max_bytes_received = std::max(st.max_bytes_received, f.received);
      st.fresh_bytes = std::max(st.fresh_bytes, f.fresh);
      st.prefaulted_bytes = std::max(st.prefaulted_bytes, f.prefaulted);
      st.peak_over_bound = std::max(st.peak_over_bound, f.bound > 0 ? static_cast<double>(f.peak) / static_cast<double>(f.bound) : 0.0);
      if (f.peak > st.peak_bytes || (f.peak == st.peak_bytes && f.bound < st.bound_bytes)) {
        st.peak_bytes = f.peak;
        st.bound_bytes = f.bound;
      }
      auto& c = st.commit_cpu;
      c.commit_thread_s = std::max(c.commit_thread_s, f.cpu.thread_s);
      c.other_threads_s = std::max(c.other_threads_s, f.cpu.other_threads_s());
      c.involuntary_switches = std::max(c.involuntary_switches, f.cpu.involuntary_switches);
      c.voluntary_switches = std::max(c.voluntary_switches, f.cpu.voluntary_switches);
      c.runqueue_s = std::max(c.runqueue_s, f.cpu.runqueue_s);
      c.asleep_s = std::max(c.asleep_s, std::max(0.0, f.total_s - f.cpu.thread_s - f.cpu.runqueue_s));
      first_start = std::min(first_start, f.start);
      last_start = std::max(last_start, f.start);
      st.bytes_kept += f.kept[0];
      st.kept_remapped_bytes += f.kept[1];
      st.kept_zero_copy_bytes += f.kept[2];
    }
    st.start_spread_s = last_start - first_start;
  }

  // The lower bound's link, on the path the switch's bytes took: every rank that sent to the
  // busiest receiver sends it 64 MiB at once (after a warm-up round) while the other ranks of
  // the transition world wait; rate = bytes that arrived / time at the busiest rank.
  void measure_link(comm::Transport& tw, const std::vector<CommitFigures>& per_rank, SwitchStats& st) {
    int busiest = 0;
    for (int r = 0; r < static_cast<int>(per_rank.size()); ++r)
      if (per_rank[r].received > per_rank[busiest].received) busiest = r;
    const int me = tw.rank();
    const std::size_t bytes = std::size_t{64} << 20;
    std::vector<int> senders;  // on the busiest rank: the peers it received from
    if (me == busiest)
      for (const auto& [peer, pieces] : pending->plan.recv)
        if (peer != me && !pieces.empty()) senders.push_back(peer);
    const bool sends = me != busiest && pending->plan.send.count(busiest) > 0 && !pending->plan.send.at(busiest).empty();
    std::vector<std::byte> buf(sends ? bytes : senders.size() * bytes, std::byte{1});
    double rate = 0;
    std::uint64_t path = 0;  // bit 0: a sender of the same job, bit 1: of another job
    auto round = [&] {
      std::vector<std::unique_ptr<comm::Request>> reqs;
      for (std::size_t i = 0; i < senders.size(); ++i)
        reqs.push_back(tw.irecv(buf.data() + i * bytes, bytes, senders[i], kTagLink));
      if (sends) reqs.push_back(tw.isend(buf.data(), bytes, busiest, kTagLink));
      comm::wait_all(reqs);
    };
    round();  // warm-up: connections made, pages touched
    tw.barrier();
    const auto t0 = Clock::now();
    constexpr int kRounds = 2;
    for (int i = 0; i < kRounds; ++i) round();
    if (me == busiest && !senders.empty()) {
      rate = static_cast<double>(bytes * senders.size() * kRounds) / seconds_since(t0);
      for (int q : senders) path |= per_rank[q].job_id == per_rank[me].job_id ? 1u : 2u;
    }
    tw.broadcast(&rate, sizeof(rate), busiest);
    tw.broadcast(&path, sizeof(path), busiest);
    st.link_bytes_per_s = rate;
    st.link_path = path == 1 ? "same job" : path == 2 ? "between jobs" : path == 3 ? "mixed" : "none";
  }

  // The commit's traffic again as bare messages (TrainerOptions::measure_exchange): per peer,
  // the bytes of this rank's planned pieces, in the engine's chunks.
  void measure_exchange(comm::Transport& tw, SwitchStats& st) {
    const vps::ElemBytes eb = vps::fp32_elem_bytes();
    std::vector<std::uint64_t> to_peer(static_cast<std::size_t>(tw.size()), 0), from_peer(to_peer);
    auto add = [&](const std::map<int, std::vector<plan::Piece>>& side, std::vector<std::uint64_t>& bytes) {
      for (const auto& [peer, pieces] : side)
        for (const auto& p : pieces)
          if (peer != tw.rank()) bytes[static_cast<std::size_t>(peer)] += p.box.numel() * eb[static_cast<int>(p.kind)];
    };
    add(pending->plan.send, to_peer);
    add(pending->plan.recv, from_peer);
    const std::size_t chunk = static_cast<std::size_t>(std::max<std::uint64_t>(pending->chunk_bytes, 4096));
    // Twice, the faster kept (as run-transition does); CPU of the training thread over both.
    const CpuUsage cpu0 = CpuUsage::now();
    st.exchange_s = opt.measure_exchange(tw, to_peer, from_peer, chunk);
    st.exchange_s = std::min(st.exchange_s, opt.measure_exchange(tw, to_peer, from_peer, chunk));
    const double cpu = CpuUsage::now().since(cpu0).thread_s / 2;
    for (double c : comm::all_gather_values(tw, cpu)) st.commit_cpu.exchange_thread_s = std::max(st.commit_cpu.exchange_thread_s, c);
  }

  // Staging and destination blocks from the pool; source blocks, taken from the old arenas, go
  // back to the pool as the engine drains them. Page-wise memory is the pool's (exec/engine.h):
  // large sources are given back page by page, large destinations built in pieces, a source
  // buffer identical to a destination one is adopted as it is (zero-copy keep), and kept runs
  // at page-congruent offsets are moved by remapping pages. Destinations the engine made by
  // reserve() or adoption reach the new arenas from its output pointers (adopt_outputs).
  class Allocator final : public exec::StateAllocator {
   public:
    Allocator(exec::PoolAllocator& pool, Arenas& next) : pool_(pool), next_(next) {}
    std::byte* allocate(std::size_t bytes) override { return pool_.allocate(bytes); }
    std::byte* allocate_destination(const vps::LocalBuffer& b, std::size_t bytes) override {
      DT_CHECK_EQ(bytes, next_.block_bytes(b));
      std::byte* p = pool_.allocate(bytes);
      next_.set(b, p);
      return p;
    }
    void release(std::byte* data, std::size_t bytes) override { pool_.release(data, bytes); }
    std::size_t pagewise_min_bytes() const override { return pool_.pagewise_min_bytes(); }
    bool can_adopt() const override { return true; }
    bool can_move_pages() const override { return true; }
    void move_pages(std::byte* from, std::size_t from_offset, std::byte* to, std::size_t to_offset,
                    std::size_t bytes) override {
      pool_.move_pages(from, from_offset, to, to_offset, bytes);
    }
    std::byte* reserve(std::size_t bytes) override { return pool_.reserve(bytes); }
    void commit(std::byte* base, std::size_t offset, std::size_t bytes) override { pool_.commit(base, offset, bytes); }
    void decommit(std::byte* base, std::size_t offset, std::size_t bytes) override {
      pool_.decommit(base, offset, bytes);
    }
    // After the transition: destination buffers not made by allocate_destination() join the
    // new arenas (their size is the buffer's, as release() will be told).
    void adopt_outputs(const vps::RankLayout& dst, const std::vector<std::byte*>& ptrs) {
      for (std::size_t i = 0; i < dst.buffers.size(); ++i)
        if (ptrs[i] != nullptr && next_.bytes(dst.buffers[i]) == nullptr)
          next_.set(dst.buffers[i], ptrs[i]);
    }

   private:
    exec::PoolAllocator& pool_;
    Arenas& next_;
  };

  // Runs the prepared plan on the transition world: every rank of it takes part (ranks beyond
  // the planner's world with an empty plan), so the commit creates no communicator. Returns the
  // engine's memory budget.
  // kept: bytes kept, of which remapped and zero-copy (exec::TransitionStats).
  std::size_t run_engine(comm::Transport& tw, Arenas& next_arenas, double& transfer_s, std::uint64_t& sent,
                         std::uint64_t& received, SwitchStats::Phases& ph, std::array<std::uint64_t, 3>& kept) {
    const PendingSwitch& ps = *pending;
    const auto tt0 = Clock::now();
    std::vector<std::byte*> src_ptrs, dst_ptrs(ps.dst_rl.buffers.size(), nullptr);
    for (const auto& b : ps.src_rl.buffers) src_ptrs.push_back(arenas.take(b));
    Allocator alloc(pool, next_arenas);
    exec::TransitionOptions to;
    to.topology.gpus_per_node = opt.gpus_per_node;
    const vps::ElemBytes eb = elem();
    exec::TransitionStats ts = exec::run_transition(ps.plan, ps.src_rl, src_ptrs, ps.dst_rl, dst_ptrs, eb, tw, alloc, to);
    sent = ts.bytes_sent;
    received = ts.bytes_received;
    transfer_s = seconds_since(tt0);
    ph.engine_pack = ts.pack_seconds;
    ph.engine_unpack = ts.unpack_seconds;
    ph.engine_keep = ts.keep_seconds;
    ph.engine_wait = ts.wait_seconds;
    ph.engine_alloc = ts.alloc_seconds;
    ph.engine_agree = ts.agree_seconds;
    alloc.adopt_outputs(ps.dst_rl, dst_ptrs);
    kept = {ts.bytes_kept, ts.kept_remapped_bytes, ts.kept_zero_copy_bytes};
    pending->chunk_bytes = ts.chunk_bytes;
    for (std::size_t i = 0; i < ps.dst_rl.buffers.size(); ++i)
      DT_CHECK(dst_ptrs[i] != nullptr || ps.dst_rl.buffers[i].numel == 0, "engine left destination buffer ", i, " empty");
    return to.mem_budget;
  }

  // ---- probe ----
  Trainer::Probe probe() {
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
        if (cfg().zero >= 2) reduce_scatter_or_copy(*g, zero_work.full(StateKind::kGrad, gb, arenas), arenas.data(gb), gb.numel);
        else if (g->size() > 1) g->all_reduce_sum(arenas.data(gb), gb.numel);
      }
      active_g->all_reduce_sum(&loss, 1);
      p.loss = loss;
    }
    // Logits of the last stage to rank 0: rows by dp rank, columns by tp rank.
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
      return p;
    }
    p.logits.assign(rows * V, 0.0f);
    for (int r = 0; r < c.world_size(); ++r) {
      const auto k = vps::rank_coords(c, r);
      const std::int64_t v0 = k.tp * vl, valid = valid_of(k.tp);
      if (k.pp != c.pp - 1 || valid == 0) continue;
      std::vector<float> buf(local_rows / c.cp * valid);
      if (r == 0) buf = logits;
      else world.irecv(buf.data(), buf.size() * sizeof(float), r, kTagLogits)->wait();
      // Row i of rank r: sequence i / sl of its dp rank, position pos[i % sl] (context_parallel.h).
      const std::int64_t S = opt.seq, sl = S / c.cp;
      const auto pos = cp_positions(k.cp, c.cp, S);
      for (std::int64_t i = 0; i < local_rows / c.cp; ++i)
        std::memcpy(&p.logits[(k.dp * local_rows + i / sl * S + pos[i % sl]) * V + v0], &buf[i * valid],
                    valid * sizeof(float));
    }
    return p;
  }
};

Trainer::Trainer(TrainerOptions options, const vps::ParallelConfig& config, comm::Transport& world,
                 std::string text) {
  vps::ParallelConfig c = config;
  check_supported(options, c);
  if (c.world_size() > world.size())
    DT_INPUT_ERROR("layout ", c.str(), " needs ", c.world_size(), " ranks; the job has ", world.size());
  impl_ = std::make_unique<Impl>(std::move(options), std::move(text));
  impl_->edm = std::make_unique<edm::DeviceManager>(world, impl_->opt.launcher);
  auto layout = impl_->make_layout(c);
  const vps::RankLayout rl = layout->rank_layout(world.rank());
  Arenas a(rl, impl_->pool, impl_->elem());
  init_state(*layout, rl, a, impl_->opt.seed, impl_->opt.loaded_kinds);
  auto& e = *impl_->edm;
  auto groups = e.cache().get(e.control(), e.ids(), c);
  impl_->adopt(std::move(layout), std::move(a), std::move(groups));
}

std::unique_ptr<Trainer> Trainer::join(TrainerOptions options, std::unique_ptr<comm::Transport> joined,
                                       std::string text) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->impl_ = std::make_unique<Impl>(std::move(options), std::move(text));
  Impl& im = *t->impl_;
  im.edm = std::make_unique<edm::DeviceManager>(std::move(joined), im.opt.launcher);
  // The job's current layout, which this process is outside of: no state, no groups.
  const auto current = vps::ParallelConfig::parse(im.edm->joined_current());
  const auto next = vps::ParallelConfig::parse(im.edm->joined_next());
  auto layout = im.make_layout(current);
  Arenas a(layout->rank_layout(im.edm->world().rank()), im.pool, im.elem());
  im.adopt(std::move(layout), std::move(a), nullptr);
  im.edm->prepare_joined(next, [&im, current, next](const edm::Prepared& p) {
    im.plan_switch(current, next, plan::Placement(p.process_of_rank));
  });
  return t;
}

Trainer::~Trainer() = default;
bool Trainer::active() const { return impl_->active(); }
const vps::ParallelConfig& Trainer::config() const { return impl_->cfg(); }
const vps::Layout& Trainer::layout() const { return *impl_->layout; }
std::int64_t Trainer::steps_done() const { return impl_->step; }
StepStats Trainer::step() { return impl_->do_step(); }
void Trainer::prepare(const vps::ParallelConfig& config, std::string payload, std::vector<int> vacate) {
  impl_->prepare(config, std::move(payload), std::move(vacate));
}
const std::string& Trainer::joined_payload() const { return impl_->edm->joined_payload(); }
bool Trainer::preparing() const { return impl_->edm->preparing(); }
int Trainer::starting_processes() const { return impl_->edm->starting_processes(); }
SwitchStats Trainer::commit(std::string leader_state) { return impl_->commit(std::move(leader_state)); }
SwitchStats Trainer::switch_to(const vps::ParallelConfig& config) {
  impl_->prepare(config, {}, {});
  return impl_->commit({});
}
bool Trainer::left() const { return impl_->left; }
int Trainer::world_size() const { return impl_->left ? 0 : impl_->edm->world().size(); }
int Trainer::lookahead() const { return impl_->lookahead; }
comm::Transport& Trainer::world() { return impl_->world(); }
void Trainer::finish() {
  auto& e = *impl_->edm;
  const int w = impl_->cfg().world_size();
  if (e.control().rank() >= w) edm::DeviceManager::wait_for_root(e.control(), edm::Wake::kFinish);
  else edm::DeviceManager::wake_from(e.control(), w, edm::Wake::kFinish);
  e.control().barrier();
}
Gathered Trainer::gather(vps::StateKind kind) {
  if (kind == vps::StateKind::kGrad) impl_->zero_stale_gradients();
  return gather_vps(*impl_->layout, kind, impl_->arenas, impl_->world());
}
Trainer::Probe Trainer::forward_backward() { return impl_->probe(); }
Trainer::Progress Trainer::progress() const {
  return {impl_->step, impl_->cursor.seed, impl_->cursor.position};
}
void Trainer::restore_progress(const Progress& p) {
  impl_->step = p.step;
  impl_->cursor.seed = p.data_seed;
  impl_->cursor.position = p.data_position;
}
Arenas& Trainer::arenas() {
  impl_->zero_stale_gradients();
  return impl_->arenas;
}

}  // namespace dynatrain::train

namespace dynatrain::train {
void set_intra_op_threads(int threads) { at::set_num_threads(std::max(1, threads)); }
}  // namespace dynatrain::train
