// One layout on this rank: its groups from the EDM's cache, and the stage's modules as views of
// its arenas (Trainer::Impl::adopt). Invariants: every weight view points into the param arena
// (or the ZeRO-2/3 working copy of its bucket), its .grad into the grad arena (or working
// copy), at the shard's offset; the views are rebuilt whenever the arenas change.
#include <string>

#include "common/error.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

using vps::StateKind;

void Trainer::Impl::use_groups(std::shared_ptr<const edm::Communicators> g) {
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
    use_model_groups();
  } else {
    etp_g = nullptr;
    cp_g = nullptr;
    dpcp_g = nullptr;
  }
}

// The model's communicators (ModelComms) of an active rank's groups.
void Trainer::Impl::use_model_groups() {
  comms.tp = tp_g->size() > 1 ? tp_g : nullptr;
  comms.tp_size = tp_g->size();
  comms.tp_rank = tp_g->rank();
  comms.ep = ep_g->size() > 1 ? ep_g : nullptr;
  comms.ep_size = ep_g->size();
  comms.ep_rank = ep_g->rank();
  const int etp = cfg().etp;
  etp_g = groups->has(edm::Group::kEtp) ? &groups->group(edm::Group::kEtp) : nullptr;
  DT_CHECK((etp_g != nullptr) == (etp > 1), "etp=", etp, " but the EDM's groups ", etp_g ? "have" : "lack",
           " an etp group");
  comms.etp = etp_g;
  comms.etp_size = etp;
  const auto& c = cfg();
  cp_g = &groups->group(edm::Group::kCp);
  dpcp_g = groups->has(edm::Group::kDpCp) ? &groups->group(edm::Group::kDpCp) : nullptr;
  comms.cp = c.cp > 1 ? cp_g : nullptr;
  comms.cp_size = c.cp;
  comms.cp_rank = rc.cp;
}

const vps::LocalBuffer& Trainer::Impl::buffer(StateKind kind, bool expert, std::int32_t bucket) const {
  for (const auto& b : rank_layout.buffers)
    if (b.kind == kind && b.expert_group == expert && b.bucket == bucket) return b;
  DT_CHECK(false, "no ", vps::state_kind_name(kind), " buffer for bucket ", bucket);
  throw;  // unreachable
}

// Local modules as views of the param arena; their .grad as views of the grad arena.
void Trainer::Impl::build_views() {
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
    bind_view(tensors[s.tensor], s, w, first_layer);
  }
}

// Puts the view `w` of tensor `t` into its slot of the stage's model.
void Trainer::Impl::bind_view(const vps::TensorSpec& t, const vps::LocalShard& s, torch::Tensor w,
                              std::int64_t first_layer) {
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

// `prepared`: this rank's layout of `l` when already computed (a switch's prepare).
// `rank`: this process's rank in `l` when it differs from its world rank (a commit, before
// the new world is adopted; -1: none, so outside the layout).
void Trainer::Impl::adopt(std::unique_ptr<vps::Layout> l, Arenas a, std::shared_ptr<const edm::Communicators> g,
                          vps::RankLayout* prepared, int rank) {
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

std::unique_ptr<vps::Layout> Trainer::Impl::make_layout(const vps::ParallelConfig& c,
                                                        std::vector<StateKind> kinds) const {
  vps::LayoutOptions lo = trainer_layout_options(opt.bucket_elems, std::move(kinds), opt.bf16);
  if (opt.align_pages) lo.align_elems = vps::kPageAlignElems;
  return std::make_unique<vps::Layout>(opt.model, c, lo);
}

}  // namespace dynatrain::train
