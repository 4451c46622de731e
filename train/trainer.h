// The reference trainer: one rank's part of a GPT / MoE training job under DP, TP, PP (1F1B),
// EP and ZeRO-0/1, whose state lives in VPS-laid-out arenas (state.h) so that a layout switch
// is a plan (plan/) executed by the engine (exec/). Torch-free header; see trainer.cc.
//
// Collective calls: step() is collective over the ranks of the current layout (others must not
// call it); switch_to(), finish(), gather() and forward_backward() are collective over the
// whole world transport. Ranks outside the current layout wait inside switch_to()/finish()
// (polling, not spinning in a collective) until rank 0 wakes them.
//
// Supported (InputError otherwise): Llama/Qwen-style models (RMSNorm, SwiGLU, no biases,
// untied embeddings, optional QK-norm, RoPE), zero in {0, 1}, cp = 1, etp = 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "train/state.h"
#include "vps/layout.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

namespace dynatrain::train {

enum class SwitchMethod {
  kEngine,  // plan::Planner + exec::run_transition (the real path)
  kGather,  // gather every tensor to rank 0 in VPS coordinates and scatter (reference path)
};
// kEngine when exec/ was built into this library, else kGather.
SwitchMethod default_switch_method();
// torch intra-op threads of this process (at::set_num_threads; the default here is 1).
void set_intra_op_threads(int threads);
const char* switch_method_name(SwitchMethod m);

struct TrainerOptions {
  vps::ModelSpec model;
  std::int64_t global_batch = 16;  // sequences per step, split evenly over dp
  std::int64_t seq = 64;           // tokens per sequence
  int micro_batches = 0;           // per dp rank and step; 0 = auto (1, or min(local batch, 2*pp))
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  std::int64_t warmup_steps = 10;  // linear learning-rate warm-up
  std::uint64_t seed = 1234;       // model init and data order
  std::int64_t bucket_elems = 32768;
  SwitchMethod switch_method = default_switch_method();
  int gpus_per_node = 8;           // topology handed to the planner
  // Fault injection for tests only: zero exp_avg and exp_avg_sq after every switch (what a
  // switch that loses the optimizer state would do), to show the loss test would notice.
  bool fault_drop_moments_on_switch = false;
};

struct StepStats {
  std::int64_t step = 0;  // 0-based index of the step just taken
  double loss = 0;        // mean token loss of the global batch (before the update)
  double seconds = 0;
  double tokens_per_s = 0;
};

struct SwitchStats {
  std::string from, to;
  SwitchMethod method = SwitchMethod::kGather;
  // Max over ranks of each part: plan = layouts + planner; transfer = run_transition (or the
  // gather path); rebuild = new arenas, communicators and module views.
  double plan_s = 0, transfer_s = 0, rebuild_s = 0, total_s = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;  // summed over ranks
};

class Trainer {
 public:
  // Collective over `world`. Validates options and config (InputError) before communicating.
  Trainer(TrainerOptions options, const vps::ParallelConfig& config, comm::Transport& world,
          std::string text);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  bool active() const;  // this rank holds part of the current layout
  const vps::ParallelConfig& config() const;
  const vps::Layout& layout() const;
  std::int64_t steps_done() const;

  // One training step; collective over the current layout's ranks. loss is on every active rank.
  StepStats step();
  // Moves the whole training state to `config` at this step boundary; collective over world.
  SwitchStats switch_to(const vps::ParallelConfig& config);
  // Collective over world: lets waiting ranks leave. Call once at the end.
  void finish();

  // ---- inspection (tests, debugging); collective over world ----
  // The full tensors of `kind` on rank 0 (replica agreement checked).
  Gathered gather(vps::StateKind kind);
  struct Probe {
    double loss = 0;
    std::vector<float> logits;  // rank 0: [global_batch * seq, vocab] row-major
  };
  // Forward and backward of the next batch without an update and without advancing the data:
  // afterwards the grad arena holds gradients reduced over dp, so gather(kGrad) is the full
  // gradient of the mean loss.
  Probe forward_backward();
  // ---- checkpoints (ckpt/): every rank calls these at a step boundary ----
  // The progress besides the arenas: steps done and the data cursor.
  struct Progress {
    std::int64_t step = 0;
    std::uint64_t data_seed = 0, data_position = 0;
  };
  Progress progress() const;
  void restore_progress(const Progress& progress);
  // This rank's state arenas of the current layout (empty when inactive). Writing into them in
  // place (a checkpoint load) keeps the model's views valid; the sizes must not change.
  Arenas& arenas();

  // Validates that `config` can run with these options; throws InputError naming the problem.
  static void check_supported(const TrainerOptions& options, vps::ParallelConfig& config);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynatrain::train
