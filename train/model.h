// The GPT / MoE model of one pipeline stage on one rank, as libtorch code over local shards.
// Includes torch: only model.cc and trainer.cc include this header.
//
// Megatron-style tensor parallelism without sequence parallelism: activations [mb, s, h] are
// replicated over the tp group. Column-parallel inputs go through copy_to_tp (identity forward,
// all-reduce backward); row-parallel outputs through reduce_from_tp (all-reduce forward,
// identity backward). The MoE layer splits the tokens over the tp ranks (each tp rank routes a
// distinct 1/tp of them, so no token reaches an expert twice) and all-gathers the result.
// Expert TP (etp > 1, etp divides tp): the etp group is etp consecutive ranks of the tp group;
// its ranks all-gather their tokens, each runs its 1/etp slice of every expert's ffn rows
// (column-parallel fc1, row-parallel fc2) on all of them, and a reduce-scatter sums the partial
// outputs back to each rank's own tokens. The ep all-to-all runs between ranks of equal etp index.
// Context parallel (cp > 1): activations hold the rank's s/cp positions (context_parallel.h);
// attention all-gathers keys and values over cp (backward: reduce-scatter) and masks by global
// position; every other op is per token.
//
// Local shard shapes are those of vps::Layout::local_shards (docs/vps.md):
//   qkv  [groups_l, q_l + 2, d, h]  (q heads of each local group, then k, then v)
//   proj [h, heads_l * d]   fc1 [2, ffn_l, h] (gate; up)   fc2 [h, ffn_l]
//   embedding / output [vocab_l, h] (rows [tp_rank * vocab_l, ...))
//   MLA: q_up [heads_l, qk, q_lora] or q [heads_l, qk, h] (qk = nope + rope), q_down [q_lora, h],
//        kv_down [kv_lora + rope, h], kv_up [heads_l, nope + v, kv_lora], proj [h, heads_l * v]
//   shared fc1 [2, fs_l, h], fc2 [h, fs_l], gate [1, h] (replicated)
//   experts fc1 [experts_l, 2, fe_l, h], fc2 [experts_l, h, fe_l] (fe_l = fe / etp)   router [experts, h]
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <vector>

#include "comm/transport.h"
#include "vps/model_spec.h"

namespace dynatrain::train {

// Communicators one stage's model uses (nullptr = group of size 1: no communication).
struct ModelComms {
  comm::Transport* tp = nullptr;
  comm::Transport* ep = nullptr;
  comm::Transport* etp = nullptr;  // expert tensor parallel group (a split of tp)
  comm::Transport* cp = nullptr;   // context parallel group (context_parallel.h)
  int cp_size = 1, cp_rank = 0;
  int tp_size = 1, tp_rank = 0;
  int ep_size = 1, ep_rank = 0;
  int etp_size = 1;
  // When raised, the forward and backward throw StepInterrupted at the next layer
  // (TrainerOptions::interrupt).
  const std::atomic<bool>* interrupt = nullptr;
};

struct LayerWeights {
  torch::Tensor input_norm, qkv, q_norm, k_norm, proj, post_norm;
  torch::Tensor qkv_bias;  // [groups_l, q_l + 2, d] (Qwen2), undefined without q/k/v biases
  // MLA (DeepSeek-V2/V3), instead of qkv: replicated down projections and their norms,
  // column-parallel (over heads) up projections; q directly when there is no q_lora_rank.
  torch::Tensor q_down, q_down_norm, q_up, q, kv_down, kv_down_norm, kv_up;
  torch::Tensor fc1, fc2;                        // dense MLP
  torch::Tensor router, expert_fc1, expert_fc2;  // MoE (undefined in a dense layer of an MoE model)
  // Shared expert of an MoE layer (Qwen2-MoE, DeepSeek): a SwiGLU MLP over every token, split
  // like the dense MLP, added to the routed output; scaled by sigmoid(x . shared_gate) if defined.
  torch::Tensor shared_fc1, shared_fc2, shared_gate;
};

struct StageModel {
  vps::ModelSpec spec;
  bool first = false, last = false;
  torch::Tensor embedding, final_norm, output;  // defined on the first / last stage
  std::vector<LayerWeights> layers;
  std::int64_t vocab_start = 0;  // first vocab row of the local embedding / output shard
};

// Token ids [mb, s] (int64; s = this cp rank's positions) -> hidden [mb, s, h] (first stage).
torch::Tensor embed_forward(const StageModel& m, const ModelComms& c, const torch::Tensor& tokens);
// Runs every layer of the stage.
torch::Tensor layers_forward(const StageModel& m, const ModelComms& c, torch::Tensor x);
// Last stage: final norm, vocab-parallel output layer and cross-entropy. Returns the per-token
// losses [mb * s]; *logits (if given) gets this rank's vocab-parallel logits [mb * s, vocab_l].
torch::Tensor loss_forward(const StageModel& m, const ModelComms& c, const torch::Tensor& x,
                           const torch::Tensor& targets, torch::Tensor* logits);

}  // namespace dynatrain::train
