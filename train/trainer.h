// The reference trainer: one rank's part of a GPT / MoE training job under DP, TP, PP (1F1B),
// CP, EP, expert TP and ZeRO-0/1/2/3, whose state lives in VPS-laid-out arenas (state.h) so that a layout switch
// is a plan (plan/) executed by the engine (exec/). Torch-free header; see trainer.cc.
//
// The job's processes, their communicators and the background preparation of a switch belong to
// the elastic device manager (edm/); the trainer asks it for groups and worlds.
//
// Collective calls: step() is collective over the ranks of the current layout (others must not
// call it); prepare(), commit(), switch_to(), finish(), gather() and forward_backward() are
// collective over the whole world, in the same order on every rank. Ranks outside the current
// layout sleep-poll inside prepare()/commit()/finish() until rank 0 wakes them.
//
// A switch = prepare(config) (returns at once; plan and communicators are built on the EDM's
// thread while steps go on) + commit() at a step boundary (transfer + rebuild views). A switch
// that needs more processes starts them (TrainerOptions::launcher); ranks that the new layout
// does not use leave the job in the commit when the launcher allows it (left()).
//
// Supported (InputError otherwise; check_supported): Llama/Qwen/DeepSeek-style models (RMSNorm,
// SwiGLU, no biases but q/k/v, untied embeddings, optional QK-norm, RoPE, MLA, shared experts),
// zero 0-3 (ZeRO-2/3 through train/zero.h), etp dividing tp, cp with seq divisible by 2*cp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "edm/launcher.h"
#include "exec/engine.h"
#include "train/interrupt.h"
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
  int gpus_per_node = 8;  // topology handed to the planner
  // Fault injection for tests only: zero exp_avg and exp_avg_sq after every switch (what a
  // switch that loses the optimizer state would do), to show the loss test would notice.
  bool fault_drop_moments_on_switch = false;
  // Starts processes when a layout needs more ranks than the world has, and ends leaving ones;
  // nullptr: the world cannot grow, and ranks outside the layout stay (idle) only if the
  // transport cannot shrink either (the in-process one can: leaving threads return).
  std::shared_ptr<edm::Launcher> launcher;
  // Steps between prepare() and the commit; 0 = automatic (from the last prepare's time).
  int lookahead = 0;
  // Which process takes which rank of the next layout (plan/placement.h): kFixed = rank r on
  // process r; kAuto = plan::auto_placement (fewest bytes to move), used where it keeps rank 0
  // on process 0 (the job's I/O runs there), else kFixed. The new world is ordered by it.
  enum class Placement { kFixed, kAuto } placement = Placement::kAuto;
  // Every tensor of every layout starts on a page boundary (vps::LayoutOptions::align_elems =
  // kPageAlignElems; the gaps are padding), so that a switch moves kept tensors that sit at a
  // new offset by remapping their pages instead of copying them
  // (SwitchStats::kept_remapped_bytes). Costs up to a page of padding per tensor and buffer.
  // On by default (train --no-align-pages: packed).
  bool align_pages = true;
  // How a switch keeps the runs that sit at a new offset (exec::KeepPath): by default remapped
  // only where this machine measured a remap faster than a copy.
  exec::KeepPath keep_path = exec::KeepPath::kAuto;
  // Mixed precision (--bf16): params held and computed with in bf16; gradients accumulated and
  // reduced in fp32; Adam on the fp32 master (its own state kind, sharded like the moments),
  // after which the bf16 params are rounded from it (vps::bf16_param_elem_bytes).
  bool bf16 = false;
  // Every step's update waits for a barrier of the layout's ranks after the step's last
  // collective (at ZeRO 0 the gradients of every bucket are reduced first), so a process lost
  // during a step leaves every survivor's state as it was before it (recover() below).
  bool commit_barrier = false;
  // Test hook: called after a step's commit barrier, before its update (fault injection).
  std::function<void()> after_commit_barrier;
  // Raised by another thread to abandon the step in progress (a peer was lost: job/loss_watch.h):
  // its forward and backward throw StepInterrupted (train/interrupt.h) at the next layer, before
  // any update.
  const std::atomic<bool>* interrupt = nullptr;
  // State kinds a resume will load right after construction (a checkpoint's kinds, and param
  // where the resume rebuilds it from master: params_from_master): the per-element weight init
  // of these kinds is skipped (they are only zeroed), since the load overwrites every element
  // of them. Empty: initialise everything.
  std::vector<vps::StateKind> loaded_kinds;
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
  std::string refused;                    // non-empty: the switch did not happen (why, one line); nothing changed
  std::string note;                       // non-empty: e.g. why ranks outside the layout stay
  int world_before = 0, world_after = 0;  // processes in the job before and after
  // Max over ranks of each part. prepare = the background part (world, communicators, layouts,
  // planner); hidden_fraction = min over ranks of the share of prepare that ended before the
  // commit began; spawn = starting processes (inside prepare). The commit: transfer =
  // run_transition (or the gather path); rebuild = new arenas and module views; total_s = the
  // whole commit = the pause between the last step in the old layout and the first in the new.
  double prepare_s = 0, hidden_fraction = 1, spawn_s = 0;
  double plan_s = 0, transfer_s = 0, rebuild_s = 0, total_s = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;  // summed over ranks
  std::uint64_t max_bytes_received = 0;              // at the busiest rank (lower bound input)
  // Summed over ranks: bytes kept on their rank, and of those the bytes not copied: moved by
  // remapping pages, or buffers handed over as they are (exec::TransitionStats).
  std::uint64_t bytes_kept = 0, kept_remapped_bytes = 0, kept_zero_copy_bytes = 0;
  // Memory of the commit at the rank closest to its bound: peak of the state and staging blocks
  // live in the trainer's pool (exec::PoolAllocator::peak_live), and the bound
  // max(source, destination) + budget; peak_over_bound is the largest ratio over ranks.
  std::uint64_t peak_bytes = 0, bound_bytes = 0;
  double peak_over_bound = 0;
  // Max over ranks: memory the prepare touched ahead (pool prefault), and memory the commit
  // still had to take fresh from the system (first-touch on the critical path; 0 is the goal).
  std::uint64_t prefaulted_bytes = 0, fresh_bytes = 0;
  std::uint64_t comm_creations = 0;  // communicators created for this switch (0 = all cached)
  // "fixed", or the process of every new rank ("0,2,1,3") when placement moved ranks.
  std::string placement = "fixed";
  int lookahead = 0;  // steps between this prepare and this commit (next: lookahead())
  // Where the pause went, max over ranks of each part (seconds; they need not sum to total_s).
  // carry: step / data cursor broadcast; engine_*: exec::TransitionStats' own split of the
  // transfer (pack, unpack, keeps, waiting for peers, allocator, wave agreement); free: the old
  // arenas back to the pool; grads: the new gradient buffers materialised; views: layout,
  // groups and module views of the new arenas. engine_system / engine_faults: the transfer's
  // system seconds and page faults (process-wide getrusage, exec::TransitionStats), which load
  // disturbs less than wall time.
  struct Phases {
    double carry = 0, engine_pack = 0, engine_unpack = 0, engine_keep = 0, engine_wait = 0, engine_alloc = 0,
           engine_agree = 0, free = 0, grads = 0, views = 0, engine_system = 0, engine_faults = 0;
  } phases;
  // Filled by a SwitchProbe (Trainer::set_switch_probe) right after the commit, outside
  // total_s; 0 / empty without one. The job's probe (job/switch_probe.h) measures the link into
  // the busiest receiver (bytes/s; its senders of the "same job", "between jobs" or "mixed")
  // and exchange_s, this switch's traffic as bare messages (max over ranks): pause / exchange_s
  // is how far the commit is from moving the same bytes bare.
  double link_bytes_per_s = 0;
  std::string link_path;
  double exchange_s = 0;
  // CPU during the commit (train/cpu_usage.h), the largest over ranks: the training thread's
  // own CPU, that of the process's other threads (a pool spinning after the step would show
  // here), and the times the kernel took the training thread off its core for another;
  // exchange_thread_s: the training thread's CPU in one bare exchange (exchange_s), for the
  // CPU the same traffic needs without the engine's work.
  // runqueue_s: the training thread runnable but without a core in the commit (the machine's
  // other work); asleep_s: neither on a core nor runnable (blocked); with voluntary_switches,
  // the times it went to sleep. The four add up to the commit's wall time on each rank.
  struct Cpu {
    double commit_thread_s = 0, other_threads_s = 0, exchange_thread_s = 0, runqueue_s = 0, asleep_s = 0;
    std::int64_t involuntary_switches = 0, voluntary_switches = 0;
  } commit_cpu;
  // Last commit start minus first, over ranks, on the monotonic clock: meaningful when every
  // process runs on one machine. A rank that starts late (still finishing its step) makes its
  // peers wait in the transfer.
  double start_spread_s = 0;
  // The placement gave rank 0 to another process (the job's leader moved; whole-job migration):
  // leader_state is the old leader's Trainer::commit argument, on every rank.
  bool leader_moved = false;
  std::string leader_state;
};

// What a commit moved, for a SwitchProbe: this rank's part and every rank's totals, in the
// transition world's ranks (the world of the commit: the larger of the old and new one).
struct SwitchTraffic {
  // This rank's planned bytes to and from every rank (0 for itself), at 4 bytes an element.
  std::vector<std::uint64_t> send_bytes, recv_bytes;
  std::size_t chunk_bytes = 0;  // the engine's chunk in the commit (at least 4096)
  // Per rank: bytes it received in the commit, and the launch its process came from
  // (edm::Launcher::job_id; processes of different launches talk over other links).
  std::vector<std::uint64_t> received, job_id;
};

// Measures a switch on its processes right after its commit, before ranks that leave have
// left; collective over the transition world (same call order on every rank). It may write the
// SwitchStats fields documented as a probe's. The trainer calls it after every commit that was
// not refused; what it measures is the caller's (job/switch_probe.h).
class SwitchProbe {
 public:
  virtual ~SwitchProbe() = default;
  virtual void measure(comm::Transport& transition_world, const SwitchTraffic& traffic, SwitchStats& stats) = 0;
};

class Trainer {
 public:
  // Collective over `world`. Validates options and config (InputError) before communicating.
  Trainer(TrainerOptions options, const vps::ParallelConfig& config, comm::Transport& world, std::string text);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  bool active() const;  // this rank holds part of the current layout
  const vps::ParallelConfig& config() const;
  const vps::Layout& layout() const;
  std::int64_t steps_done() const;

  // One training step; collective over the current layout's ranks. loss is on every active rank.
  StepStats step();
  // Starts preparing a switch to `config` in the background; collective over world. Validates
  // `config` first (InputError). `payload` (rank 0's) reaches processes this switch starts
  // (joined_payload()).
  // `vacate`: world ranks that must hold nothing after the switch and leave (rank 0 too: the
  // leader role then moves, see commit()); the layout's ranks go to the others, in order, and
  // to processes started for the rest.
  // `keep`: no process leaves; the ones outside `config` stay, idle, for a later switch
  // (`dynatrain request --lend`, edm::DeviceManager::prepare).
  void prepare(const vps::ParallelConfig& config, std::string payload = {}, std::vector<int> vacate = {},
               bool keep = false);
  // In a process started by a grow: the payload of the prepare that started it.
  const std::string& joined_payload() const;
  bool preparing() const;
  // Processes the background prepare is starting now (0 when none); safe from any thread.
  int starting_processes() const;
  // At a step boundary: waits for the prepare if needed, moves the whole training state, and
  // rebuilds views; collective over the world (the larger of the old and new one).
  // `leader_state` (world rank 0's; others pass nothing): the caller's state of the job's leader
  // beyond the VPS state (its files, reports, schedule). When the placement gives rank 0 to
  // another process, the leader role moves there and every rank gets this in
  // SwitchStats::leader_state.
  SwitchStats commit(std::string leader_state = {});
  // The commits' sign of life for a watchdog (job/watchdog.h): raised, as a commit goes, by
  // every byte the engine finishes (exec::TransitionOptions::progress: each round sent or
  // received, each keep) and by the bytes of each tensor the reference path broadcasts; it only
  // grows. A watchdog armed with it ends a commit only after a whole deadline without progress.
  // Safe from any thread; lives as long as the trainer.
  const std::atomic<std::uint64_t>* switch_progress() const;
  // The probe every later commit runs (nullptr: none). Set it on every rank alike.
  void set_switch_probe(std::shared_ptr<SwitchProbe> probe);
  // prepare + commit at once.
  SwitchStats switch_to(const vps::ParallelConfig& config);
  // After a commit that removed this process from the job: call nothing but the destructor.
  // A lost process recovered in place (job/lost_peer.h): `survivors` (the surviving processes'
  // world, rank i the i-th survivor in the old world's order; collective over it) replaces the
  // world, and the state of the current layout, which every process of the old world held a
  // rank of, moves into layout `to` (at most survivors' size ranks) from what the survivors
  // hold. The step and data cursor stay: the interrupted step is done again. InputError naming
  // the boxes when the lost processes held the only copy of some (ZeRO shards, tp or pp pieces
  // without a dp replica), or when the survivors are not at one step (some applied a step's
  // update that others cannot: apply_ready_update first, where they can). Returns the move's figures as a switch's (max over the
  // survivors; the probe's too, when one is set), the seconds spent building the survivors'
  // groups of `to` and making the memory the rebuild adds resident (max over them), and this
  // process's seconds in the probe (outside the pause, as for a switch).
  struct Recovery {
    SwitchStats stats;
    double groups_s = 0, prefault_s = 0, probe_s = 0;
  };
  Recovery recover(std::unique_ptr<comm::Transport> survivors, const vps::ParallelConfig& to);
  // Redundancy 2: a copy of each rank's state kept by a process on another node, so that a lost
  // node is recovered from memory. Collective over the world, after a step: (re)holds the copies
  // when the layout changed (edm/copy_holders.h over `node_of_process`, the node of each world
  // process: InputError when all share one node), then every rank sends its moved kinds (less
  // those a rank on another node holds too) to its copy's holder and receives the copies it
  // keeps. A recovery after it uses the copies whose holders survived when every survivor's are
  // of the step it stands at.
  void refresh_copies(const std::vector<std::string>& node_of_process);
  // The bytes of the copies this process keeps.
  std::size_t copy_bytes() const;
  // A lost process met in a step's commit barrier (TrainerOptions::commit_barrier, ZeRO 0): the
  // barrier may have completed on other survivors, who applied the update. update_ready():
  // whether this process did every collective of its last step and only the update is left;
  // apply_ready_update() applies it as the barrier's end would have, and counts the step.
  bool update_ready() const;
  StepStats apply_ready_update();
  // Makes resident, and keeps in the pool for the next switch or recovery, the memory a move of
  // the state into `next` could add to this process: max(0, the largest rank's state there - this
  // rank's state now) + the engine's staging (its budget, or both states' bytes if less). Returns the bytes made resident now (0
  // when the pool held them already). Local; no collective.
  std::size_t reserve_for(const vps::ParallelConfig& next);
  // False from the start of a commit's (or a recovery's) transfer until its new layout is
  // adopted: an error in between leaves the state in neither layout whole, so no recovery.
  bool state_intact() const;
  bool left() const;
  int world_size() const;    // processes in the job now
  comm::Transport& world();  // the job's world now (changes at commits that grow or shrink it)
  // Steps ahead of a switch to call prepare(): TrainerOptions::lookahead, or chosen from the
  // last prepare's time and step time (equal on every rank).
  int lookahead() const;
  // In a process started by a grow: joins the job (collective with the starters' prepare) and
  // prepares the pending switch; call commit() next. `joined` is Launcher::join()'s world.
  static std::unique_ptr<Trainer> join(TrainerOptions options, std::unique_ptr<comm::Transport> joined,
                                       std::string text);
  // Collective over world: wakes waiting ranks for the end. Call once at the end.
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
  // Sets every param from its master copy, as each optimizer step ends (param = master, rounded
  // to bf16 with --bf16): after loading a checkpoint that holds master but no params, the same
  // bytes as if they had been loaded. Collective over the current layout's ranks (the ZeRO 1/2
  // all-gather); active ranks only.
  void params_from_master();
  // This rank's state arenas of the current layout (empty when inactive). Writing into them in
  // place (a checkpoint load) keeps the model's views valid; the sizes must not change.
  Arenas& arenas();

  // Validates that `config` can run with these options; throws InputError naming the problem.
  static void check_supported(const TrainerOptions& options, vps::ParallelConfig& config);

 private:
  Trainer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynatrain::train
