// One layout on this rank: its groups from the EDM's cache, and the stage's modules as views of
// its arenas (Trainer::Impl::adopt). Invariants: every weight view points into the param arena
// (or the ZeRO-2/3 working copy of its bucket), its .grad into the grad arena (or working
// copy), at the shard's offset; the views are rebuilt whenever the arenas change.

#include "common/error.h"
#include "edm/new_rank.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

using vps::StateKind;

namespace {

// The field of a layer that holds a tensor of `role`; nullptr for a role the trainer's model
// does not implement (check_supported refuses those models first).
torch::Tensor* layer_slot(LayerWeights& L, vps::TensorRole role) {
  using R = vps::TensorRole;
  switch (role) {
    case R::kInputNorm: return &L.input_norm;
    case R::kQkv: return &L.qkv;
    case R::kQkvBias: return &L.qkv_bias;
    case R::kQNorm: return &L.q_norm;
    case R::kKNorm: return &L.k_norm;
    case R::kProj: return &L.proj;
    case R::kQDown: return &L.q_down;
    case R::kQDownNorm: return &L.q_down_norm;
    case R::kQUp: return &L.q_up;
    case R::kQ: return &L.q;
    case R::kKvDown: return &L.kv_down;
    case R::kKvDownNorm: return &L.kv_down_norm;
    case R::kKvUp: return &L.kv_up;
    case R::kPostAttnNorm: return &L.post_norm;
    case R::kFc1: return &L.fc1;
    case R::kFc2: return &L.fc2;
    case R::kRouter: return &L.router;
    case R::kExpertFc1: return &L.expert_fc1;
    case R::kExpertFc2: return &L.expert_fc2;
    case R::kSharedFc1: return &L.shared_fc1;
    case R::kSharedFc2: return &L.shared_fc2;
    case R::kSharedGate: return &L.shared_gate;
    default: return nullptr;
  }
}

// Tensors whose gradient is partial over tp (Trainer::Impl::tp_partial): q/k norms and MLA's
// down projections and their norms see only local heads; the router only the tokens of its tp
// rank.
bool partial_over_tp(vps::TensorRole role) {
  using R = vps::TensorRole;
  return role == R::kQNorm || role == R::kKNorm || role == R::kRouter || role == R::kQDown || role == R::kQDownNorm ||
         role == R::kKvDown || role == R::kKvDownNorm;
}

}  // namespace

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
  comms.interrupt = opt.interrupt;
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
    torch::Tensor w =
        torch::from_blob(zero_work.full_bytes(StateKind::kParam, pb, arenas) + s.offset * pe, s.local_shape, popts);
    w.requires_grad_(true);
    w.mutable_grad() = torch::from_blob(zero_work.full(StateKind::kGrad, gb, arenas) + s.offset, s.local_shape,
                                        torch::TensorOptions().dtype(torch::kFloat));
    bind_view(tensors[s.tensor], s, w, first_layer);
  }
}

// Puts the view `w` of tensor `t` into its slot of the stage's model (by the tensor's role).
void Trainer::Impl::bind_view(const vps::TensorSpec& t, const vps::LocalShard& s, torch::Tensor w,
                              std::int64_t first_layer) {
  using R = vps::TensorRole;
  const std::int64_t vocab_start = s.boxes.empty() ? t.shape[0] : s.boxes[0].lo[0];
  if (t.role == R::kWordEmbedding || t.role == R::kOutput) {
    (t.role == R::kOutput ? model.output : model.embedding) = w;
    model.vocab_start = vocab_start;
    return;
  }
  if (t.role == R::kFinalNorm) {
    model.final_norm = w;
    return;
  }
  DT_CHECK(t.stage == vps::Stage::kLayer, "unexpected tensor ", t.name);
  torch::Tensor* slot = layer_slot(model.layers.at(t.layer - first_layer), t.role);
  DT_CHECK(slot != nullptr, "unexpected tensor ", t.name);
  *slot = w;
  if (partial_over_tp(t.role)) tp_partial.push_back(w);
}

// `prepared`: this rank's layout of `l` when already computed (a switch's prepare).
// `rank`: this process's rank in `l` when it differs from its world rank (a commit, before
// the new world is adopted; -1: none, so outside the layout).
void Trainer::Impl::adopt(std::unique_ptr<vps::Layout> l, Arenas a, std::shared_ptr<const edm::Communicators> g,
                          vps::RankLayout* prepared, int rank) {
  model = StageModel{};  // drop views of the old arenas first
  layout = std::move(l);
  const int r = rank == -2 ? world().rank() : edm::held_rank_index(rank, layout->config().world_size(), world().rank());
  layout_rank = r;
  rank_layout = prepared ? std::move(*prepared) : layout->rank_layout(r);
  rc = vps::rank_coords(layout->config(), r);
  arenas = std::move(a);
  use_groups(std::move(g));
  if (rc.active)
    zero_work.reset(rank_layout, cfg().zero, shard_group(false)->size(), edp_g->size(), elem());
  else
    zero_work = ZeroWork{};
  build_views();
}

std::unique_ptr<vps::Layout> Trainer::Impl::make_layout(const vps::ParallelConfig& c,
                                                        std::vector<StateKind> kinds) const {
  vps::LayoutOptions lo = trainer_layout_options(opt.bucket_elems, std::move(kinds), opt.bf16);
  if (opt.align_pages) lo.align_elems = vps::kPageAlignElems;
  return std::make_unique<vps::Layout>(opt.model, c, lo);
}

}  // namespace dynatrain::train
