// The reference trainer's test fixture (ranks as threads of one process, inproc transport):
// tiny models beyond the presets, options, a probe of one layout's forward and backward, the
// state after some steps, loss curves of a (switching) run, and the loss-tracking check with
// its tolerance taken from the run's own static-vs-static noise.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "comm/inproc/inproc_transport.h"
#include "train/data.h"
#include "train/trainer.h"

namespace dynatrain::train::test {

// Presets, plus tiny versions of the Qwen2-MoE and DeepSeek MoE shapes: "tiny-qwen2-moe" (a
// shared expert with its sigmoid gate in every MoE layer) and "tiny-deepseek-moe" (a shared
// expert without gate, layer 0 dense as with first_k_dense_replace = 1); "tiny-qwen2" (dense
// with q/k/v biases; tiny-qwen2-moe has them too); "tiny-mla" (dense, MLA
// attention with queries projected directly) and "tiny-deepseek-v2" (tiny-deepseek-moe with MLA
// and a q_lora_rank).
vps::ModelSpec test_model(const std::string& name);
TrainerOptions tiny(const std::string& model, std::int64_t batch = 8, std::int64_t seq = 16);
vps::ParallelConfig cfg(const std::string& s);
// A config string as a test name ("tp=2,dp=2" -> "tp_2_dp_2").
std::string config_test_name(const ::testing::TestParamInfo<std::string>& info);

struct ProbeResult {
  double loss = 0;
  std::vector<float> logits;
  std::vector<std::vector<float>> grads;
};
// Trainer::forward_backward in `config`: loss, logits and the full gradient on rank 0.
ProbeResult probe(const TrainerOptions& o, const std::string& config);
// max |a - b| <= atol + rtol * max |b| over the whole vector.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rtol, double atol,
                  const std::string& what);
void expect_matches_reference(const std::string& model, const std::string& config);

// A vocabulary of 256 padded to a multiple of 128 * tp (Megatron's padding): at tp=3 the last
// rank, at tp=4 the last two hold only padding rows of the embedding and output layer. They
// contribute zeros to the embedding and -inf / 0 to the cross-entropy's max and sums, and take
// part in every collective (tests/train/vocab_padding_llama.json is the same model for mpirun).
TrainerOptions padded_vocab();

// Params, master, exp_avg, exp_avg_sq (in that order) after `steps` steps in `config`, gathered
// on rank 0; the losses of those steps when asked for.
std::vector<std::vector<std::vector<float>>> state_after(const TrainerOptions& o, const std::string& config, int steps,
                                                         std::vector<double>* losses = nullptr);

// Rank 0's loss of every step of a run that switches at the schedule's steps (entry 0: the
// first layout); ranks outside the layout skip steps.
std::vector<double> losses(const TrainerOptions& o, int world_size,
                           const std::vector<std::pair<int, std::string>>& schedule, int steps);

// The floor of the loss-tracking tolerance (train_fixture.cc says how it was chosen).
double loss_tolerance(const std::string& model);
// A switching run's loss against the static run's, within tracking_tolerance of the static
// runs' own noise (a second static run in schedule[1]'s layout); with check_fault, a run that
// loses the Adam moments at every switch must be caught.
void expect_tracks(const std::string& model, const std::vector<std::pair<int, std::string>>& schedule, int world_size,
                   bool check_fault = false, int steps = 60, bool bf16 = false, double tolerance = 0);

}  // namespace dynatrain::train::test
