// The public Trainer: construction (a fresh job, or a process a grow started), the calls that
// forward to Trainer::Impl (trainer_impl.h maps the files that hold it), and check_supported.
// Invariants: a Trainer is built on every rank of its world with the same options and config;
// check_supported rejects a config before anything is allocated or communicated.
#include "train/trainer.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

SwitchMethod default_switch_method() {
#ifdef DT_HAVE_EXEC
  return SwitchMethod::kEngine;
#else
  return SwitchMethod::kGather;
#endif
}

const char* switch_method_name(SwitchMethod m) { return m == SwitchMethod::kEngine ? "engine" : "gather"; }

void set_intra_op_threads(int threads) { at::set_num_threads(std::max(1, threads)); }

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
    DT_INPUT_ERROR("MoE layers split the ", local / micro * (o.seq / c.cp), " tokens of a micro-batch over tp=", c.tp,
                   ", which does not divide them");
}

Trainer::Trainer(TrainerOptions options, const vps::ParallelConfig& config, comm::Transport& world, std::string text) {
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
void Trainer::prepare(const vps::ParallelConfig& config, std::string payload, std::vector<int> vacate, bool keep) {
  impl_->prepare(config, std::move(payload), std::move(vacate), keep);
}
const std::string& Trainer::joined_payload() const { return impl_->edm->joined_payload(); }
bool Trainer::preparing() const { return impl_->edm->preparing(); }
int Trainer::starting_processes() const { return impl_->edm->starting_processes(); }
const std::atomic<std::uint64_t>* Trainer::switch_progress() const { return &impl_->switch_progress; }
SwitchStats Trainer::commit(std::string leader_state) { return impl_->commit(std::move(leader_state)); }
void Trainer::set_switch_probe(std::shared_ptr<SwitchProbe> probe) { impl_->switch_probe = std::move(probe); }
SwitchStats Trainer::switch_to(const vps::ParallelConfig& config) {
  impl_->prepare(config, {}, {}, false);
  return impl_->commit({});
}
bool Trainer::left() const { return impl_->left; }
int Trainer::world_size() const { return impl_->left ? 0 : impl_->edm->world().size(); }
int Trainer::lookahead() const { return impl_->lookahead; }
comm::Transport& Trainer::world() { return impl_->world(); }
void Trainer::finish() {
  auto& e = *impl_->edm;
  const int w = impl_->cfg().world_size();
  if (e.control().rank() >= w)
    edm::DeviceManager::wait_for_root(e.control(), edm::Wake::kFinish);
  else
    edm::DeviceManager::wake_from(e.control(), w, edm::Wake::kFinish);
  e.control().barrier();
}
Gathered Trainer::gather(vps::StateKind kind) {
  if (kind == vps::StateKind::kGrad) impl_->zero_stale_gradients();
  return gather_vps(*impl_->layout, kind, impl_->arenas, impl_->world());
}
Trainer::Probe Trainer::forward_backward() { return impl_->probe(); }
Trainer::Progress Trainer::progress() const { return {impl_->step, impl_->cursor.seed, impl_->cursor.position}; }
void Trainer::restore_progress(const Progress& p) {
  impl_->step = p.step;
  impl_->cursor.seed = p.data_seed;
  impl_->cursor.position = p.data_position;
}
void Trainer::params_from_master() { impl_->params_from_master(); }
Arenas& Trainer::arenas() {
  impl_->zero_stale_gradients();
  return impl_->arenas;
}

}  // namespace dynatrain::train
