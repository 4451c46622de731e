// The optimizer of one step: gradients zeroed before the forward, ZeRO-3's param gather, and
// Adam per bucket over its shard group. Invariants: after optimizer_step() every param element
// equals its master element (rounded to bf16 with --bf16) on every rank that holds it; the
// master and moments of a bucket are touched only by the rank that owns their shard.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "train/bf16.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

using vps::StateKind;

void Trainer::Impl::zero_kind(StateKind kind) {
  for (const auto& b : rank_layout.buffers)
    if (b.kind == kind && b.numel > 0) std::memset(arenas.bytes(b), 0, arenas.block_bytes(b));
}

// Gradients to zero before a backward: the grad state buffers and the working copies that
// autograd accumulates into at zero >= 2.
void Trainer::Impl::zero_grads() {
  zero_kind(StateKind::kGrad);
  zero_work.zero_grads();
}

// ZeRO-3: each param bucket all-gathered from its shards into the working copy the model
// computes on (the whole stage at once, before the forward). No-op below zero=3.
void Trainer::Impl::gather_params() {
  if (cfg().zero < 3) return;
  for (const auto& pb : rank_layout.buffers)
    if (pb.kind == StateKind::kParam)
      all_gather_bytes_or_copy(*shard_group(pb.expert_group), arenas.bytes(pb),
                               zero_work.full_bytes(StateKind::kParam, pb, arenas), arenas.block_bytes(pb));
}

void Trainer::Impl::adam(float* master, float* m, float* v, const float* g, std::int64_t n) const {
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

// Per bucket, over its shard group (dp for dense buckets, edp for expert buckets):
//   ZeRO-0: all-reduce the grads, Adam on the full bucket, params = master;
//   ZeRO-1: reduce-scatter the grads into a scratch shard, Adam on the shard, all-gather the
//           params from the master shards;
//   ZeRO-2: the same, reduce-scattered into the grad state shard (kept: gather(kGrad) reads it);
//   ZeRO-3: the same, and the param state shard = master shard (no all-gather: the next
//           forward gathers, gather_params()).
// "params = master" is a copy in fp32 and a rounding to bf16 with --bf16 (at ZeRO-1/2 the
// rounded shard is what the all-gather moves: half the bytes).
// With the commit barrier at ZeRO 0 the update is local: once the barrier is entered it is
// ready (ready_update), and a process whose barrier met a lost peer that others' barriers did
// not can still apply it (Trainer::apply_ready_update).
void Trainer::Impl::optimizer_step(float loss, Clock::time_point t0) {
  bool reduced = false;
  if (opt.commit_barrier) {  // every collective of the step, then the barrier, then the update
    if (cfg().zero == 0) {
      for (const auto& pb : rank_layout.buffers)
        if (pb.kind == StateKind::kParam) reduce_full_grad(pb);
      reduced = true;
      ready_update = ReadyUpdate{loss, t0};
    }
    active_g->barrier();
    if (opt.after_commit_barrier) opt.after_commit_barrier();
    updating = !reduced;
  }
  apply_update(reduced);
  updating = false;
}

// Adam on every bucket (`reduced`: the full gradients are summed over dp already).
void Trainer::Impl::apply_update(bool reduced) {
  std::vector<float> scratch;
  std::vector<std::uint16_t> scratch16;
  for (const auto& pb : rank_layout.buffers)
    if (pb.kind == StateKind::kParam) step_bucket(pb, scratch, scratch16, reduced);
  ready_update.reset();
}

// ZeRO 0: the bucket's gradient summed over its dp group, in place.
void Trainer::Impl::reduce_full_grad(const vps::LocalBuffer& pb) {
  const auto& gb = buffer(StateKind::kGrad, pb.expert_group, pb.bucket);
  comm::Transport* group = shard_group(pb.expert_group);
  if (group->size() > 1) group->all_reduce_sum(zero_work.full(StateKind::kGrad, gb, arenas), pb.numel);
}

// The optimizer step of the bucket whose param buffer is `pb` (see optimizer_step).
void Trainer::Impl::step_bucket(const vps::LocalBuffer& pb, std::vector<float>& scratch,
                                std::vector<std::uint16_t>& scratch16, bool reduced) {
  const auto& gb = buffer(StateKind::kGrad, pb.expert_group, pb.bucket);
  const auto& mb = buffer(StateKind::kMaster, pb.expert_group, pb.bucket);
  const auto& ab = buffer(StateKind::kExpAvg, pb.expert_group, pb.bucket);
  const auto& sb = buffer(StateKind::kExpAvgSq, pb.expert_group, pb.bucket);
  comm::Transport* group = shard_group(pb.expert_group);
  float* grad = zero_work.full(StateKind::kGrad, gb, arenas);  // the full bucket's gradient
  float* master = arenas.data(mb);
  float* m = arenas.data(ab);
  float* v = arenas.data(sb);
  if (cfg().zero == 0) {
    DT_CHECK_EQ(mb.numel, pb.numel);
    if (!reduced) reduce_full_grad(pb);
    adam(master, m, v, grad, pb.numel);
  } else {
    const std::int64_t shard = mb.numel;
    float* shard_grad = arenas.data(gb);
    if (cfg().zero < 2) {
      scratch.resize(shard);
      shard_grad = scratch.data();
    }
    reduce_scatter_or_copy(*group, grad, shard_grad, shard);
    adam(master, m, v, shard_grad, shard);
  }
  param_from_master(pb, scratch16);
}

// The bucket's params from its master: the local shard at ZeRO 0 and 3, the dp all-gather of
// the shards at ZeRO 1/2.
void Trainer::Impl::param_from_master(const vps::LocalBuffer& pb, std::vector<std::uint16_t>& scratch16) {
  const int zero = cfg().zero;
  auto cast = [&](const float* master, std::byte* param, std::int64_t n) {
    if (opt.bf16)
      to_bf16(master, reinterpret_cast<std::uint16_t*>(param), n);
    else
      std::memcpy(param, master, static_cast<std::size_t>(n) * sizeof(float));
  };
  const auto& mb = buffer(StateKind::kMaster, pb.expert_group, pb.bucket);
  comm::Transport* group = shard_group(pb.expert_group);
  std::byte* param = arenas.bytes(pb);
  const float* master = arenas.data(mb);
  const std::int64_t shard = mb.numel;
  if (zero == 0 || zero >= 3) {
    cast(master, param, shard);
  } else if (opt.bf16) {
    scratch16.resize(shard);
    to_bf16(master, scratch16.data(), shard);
    all_gather_bytes_or_copy(*group, scratch16.data(), param, static_cast<std::size_t>(shard) * 2);
  } else {
    all_gather_or_copy(*group, master, reinterpret_cast<float*>(param), shard);
  }
}

void Trainer::Impl::params_from_master() {
  std::vector<std::uint16_t> scratch16;
  for (const auto& pb : rank_layout.buffers)
    if (pb.kind == StateKind::kParam) param_from_master(pb, scratch16);
}

}  // namespace dynatrain::train
