// Train-internal: the state of one rank's Trainer (Trainer::Impl) and the declarations its
// files share. Includes torch (through model.h): only train/trainer*.cc include this header.
//
//   trainer.cc            the public Trainer API, construction, join, check_supported
//   trainer_views.cc      one layout's groups and module views of its arenas (adopt)
//   trainer_step.cc       one step: micro-batches under 1F1B, tp-partial gradients
//   trainer_optimizer.cc  ZeRO-0/1/2/3 Adam over the buckets, gradient zeroing
//   trainer_switch.cc     a switch: prepare (placement, plan, prefault) and commit
//   trainer_report.cc     a commit's figures from every rank folded into SwitchStats
//   trainer_probe.cc      forward_backward(): gradients and logits without an update
//   trainer_recover.cc    recover(): a lost process's state rebuilt from what survivors hold
//   trainer_copies.cc     redundancy 2: copies of other ranks' state, a recovery's sources
//
// Invariants of Impl: the module views (model) always view the current arenas, or are empty
// while a commit replaces the arenas; groups are non-null exactly on ranks of the current
// layout (rc.active); pending is set from a prepare's plan until its commit ends.
#pragma once

#include <array>
#include <atomic>
#include <type_traits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "edm/device_manager.h"
#include "exec/pool_allocator.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "train/cpu_usage.h"
#include "train/data.h"
#include "train/model.h"
#include "train/trainer.h"
#include "train/zero.h"

namespace dynatrain::train {

// Message tags of the trainer's own point-to-point traffic (pipeline and logits probe).
constexpr int kTagForward = 101, kTagBackward = 102, kTagLogits = 104;

// The state kinds a switch moves (gradients are zero at a step boundary and are rebuilt).
inline const std::vector<vps::StateKind> kMovedKinds = {vps::StateKind::kParam, vps::StateKind::kMaster,
                                                        vps::StateKind::kExpAvg, vps::StateKind::kExpAvgSq};

// Micro-batches per dp rank and step: `requested`, or 1 without pp, else the largest divisor of
// the local batch up to 2 * pp.
int auto_micro_batches(std::int64_t local_batch, int pp, int requested);

// A switch being prepared: what the EDM's thread computed for this rank (no communication).
struct PendingSwitch {
  vps::ParallelConfig next;
  std::unique_ptr<vps::Layout> dst_full;  // every state kind of the new layout
  vps::RankLayout dst_full_rl, src_rl, dst_rl;
  plan::RankPlan plan;            // this rank's part (moved kinds only)
  plan::Placement placement;      // process (transition world rank) of every new rank
  int new_rank = -1;              // this process's rank in the new layout (-1: none)
  std::size_t prefaulted = 0;     // bytes the prepare touched in the pool
  std::uint64_t chunk_bytes = 0;  // the engine's chunk in the commit (exchange probe)
  double plan_s = 0;
  // src_rl's first own_sources buffers are this process's arenas; the rest are the copies it
  // keeps (Impl::copies, in order), sources of a recovery (plan::SwitchPlacement::copies).
  std::size_t own_sources = 0;
};

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

// Max of the timings and phases, min of the hidden share, sum and max of the bytes
// (trainer_report.cc).
void fold_commit_figures(const std::vector<CommitFigures>& all, SwitchStats& st);

// What the transfer of a commit did on this rank (trainer_switch.cc).
struct TransferResult {
  double transfer_s = 0;
  std::uint64_t sent = 0, received = 0;
  std::array<std::uint64_t, 3> kept{};  // kept, of which remapped, of which zero-copy
  std::size_t budget = 0;               // the engine's memory budget (0 on the gather path)
};

// The engine options of this trainer's switches (the topology and keep path; the default budget).
exec::TransitionOptions engine_options(const TrainerOptions& opt);

struct Trainer::Impl {
  TrainerOptions opt;
  std::unique_ptr<edm::DeviceManager> edm;
  std::unique_ptr<comm::Transport> own_world;  // the survivors' world after a recovery (edm's world)
  std::string text;
  DataCursor cursor;
  std::int64_t step = 0;

  std::unique_ptr<vps::Layout> layout;
  vps::RankLayout rank_layout;
  vps::RankCoords rc;
  // Every state block comes from this pool (declared before the arenas: it outlives them), so
  // a switch builds the destination in the memory the source gives back as it drains.
  exec::PoolAllocator pool{exec::HugePages::kAuto, engine_options(opt)};
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
  comm::Transport *tp_g = nullptr, *dp_g = nullptr, *pp_g = nullptr, *ep_g = nullptr, *edp_g = nullptr,
                  *active_g = nullptr;
  std::unique_ptr<PendingSwitch> pending;
  std::shared_ptr<SwitchProbe> switch_probe;  // run after every commit (Trainer::set_switch_probe)
  bool left = false;
  int layout_rank = 0;       // this process's rank in the current layout (>= its size: none)
  bool grads_stale = false;  // gradient buffers hold garbage since the last commit (until zeroed)
  bool moving = false;       // a commit's transfer began and its new layout is not adopted yet
  // Agreed at every commit (rank 0's choice). Before the first prepare has been measured: 20
  // steps, a constant so that every rank prepares at the same step. Starting processes can take
  // seconds on a loaded machine (2.3 s, 14 steps of the demo's 160 ms, in one run); preparing
  // early only holds the prefaulted memory longer, preparing late shows in the pause.
  int lookahead = 20;
  int lookahead_used = 0;
  std::atomic<std::uint64_t> switch_progress{0};  // Trainer::switch_progress
  double last_step_s = 0;
  // Set while a step's every collective is done and only its update is left (commit barrier,
  // ZeRO 0: from before the barrier to the update's end): what apply_ready_update needs.
  struct ReadyUpdate {
    float loss = 0;
    Clock::time_point t0;
  };
  std::optional<ReadyUpdate> ready_update;
  // Set from the commit barrier to the update's end where the update has collectives (ZeRO 1-3:
  // the gradients' reduce-scatter and the params' all-gather per bucket): a loss met there left
  // some buckets updated on the survivors and the lost ranks' share of the update nowhere.
  bool updating = false;
  // Redundancy 2 (trainer_copies.cc): the moved kinds of other ranks of the current layout,
  // kept here (pool blocks; null for a kind the copy leaves out) and refreshed after each step;
  // a recovery gives them to the engine as sources, any other commit releases them.
  struct HeldCopy {
    int rank = 0;
    std::uint32_t absent = 0;  // bit k: StateKind k not kept (a rank on another node holds it)
    vps::RankLayout layout;
    std::vector<std::byte*> buffers;
  };
  struct Copies {
    std::vector<HeldCopy> held;                   // ascending rank
    std::vector<int> holders;                     // [layout rank]: the layout rank keeping its copy (empty: none held)
    std::vector<std::uint32_t> absent;            // [layout rank]: the kinds its copy leaves out
    std::vector<int> process_of_rank;             // [layout rank]: its process in the world
    vps::RankLayout own;                          // this rank's moved kinds, the buffers it sends
    std::int64_t step = -1;                       // the step whose state every held copy has (-1: none complete)
    bool on() const { return !holders.empty(); }  // held for the current layout
  } copies;
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
  // The group a bucket is sharded and reduced over: edp for expert buckets, else dp (x cp).
  comm::Transport* shard_group(bool expert) { return expert ? edp_g : dpcp_g ? dpcp_g : dp_g; }

  // ---- views (trainer_views.cc) ----
  void use_groups(std::shared_ptr<const edm::Communicators> g);
  void use_model_groups();
  const vps::LocalBuffer& buffer(vps::StateKind kind, bool expert, std::int32_t bucket) const;
  void build_views();
  void bind_view(const vps::TensorSpec& t, const vps::LocalShard& s, torch::Tensor w, std::int64_t first_layer);
  void adopt(std::unique_ptr<vps::Layout> l, Arenas a, std::shared_ptr<const edm::Communicators> g,
             vps::RankLayout* prepared = nullptr, int rank = -2);
  std::unique_ptr<vps::Layout> make_layout(const vps::ParallelConfig& c,
                                           std::vector<vps::StateKind> kinds = {
                                               vps::StateKind::kParam, vps::StateKind::kGrad, vps::StateKind::kMaster,
                                               vps::StateKind::kExpAvg, vps::StateKind::kExpAvgSq}) const;

  // ---- one step (trainer_step.cc) ----
  struct MicroBatches;  // one step's micro-batches on this stage
  void exchange(const torch::Tensor* send, int send_peer, int send_tag, torch::Tensor* recv, int recv_peer,
                int recv_tag);
  double run_microbatches(std::vector<float>* logits_out);
  void reduce_tp_partial_grads();
  StepStats do_step();

  // ---- optimizer (trainer_optimizer.cc) ----
  void zero_kind(vps::StateKind kind);
  void zero_grads();
  void gather_params();
  void adam(float* master, float* m, float* v, const float* g, std::int64_t n) const;
  void optimizer_step(float loss, Clock::time_point t0);
  void apply_update(bool reduced);
  StepStats step_done(float loss, Clock::time_point t0);
  void step_bucket(const vps::LocalBuffer& pb, std::vector<float>& scratch, std::vector<std::uint16_t>& scratch16,
                   bool reduced);
  void reduce_full_grad(const vps::LocalBuffer& pb);
  void param_from_master(const vps::LocalBuffer& pb, std::vector<std::uint16_t>& scratch16);
  void params_from_master();

  // ---- switch (trainer_switch.cc) ----
  void prepare(vps::ParallelConfig next, std::string payload, std::vector<int> vacate, bool keep);
  edm::DeviceManager::Place place(const vps::ParallelConfig& current, const vps::ParallelConfig& next,
                                  const std::vector<int>& vacate) const;
  void plan_switch(const vps::ParallelConfig& current, const vps::ParallelConfig& next, plan::Placement placement);
  std::unique_ptr<PendingSwitch> new_pending(const vps::ParallelConfig& next, plan::Placement placement, int r) const;
  static void take_plan(PendingSwitch& ps, const plan::Planner& planner, int r);
  std::size_t prefault_for(const PendingSwitch& ps);
  // The memory a move from `src` to `dst` bytes of this rank's state needs beyond what the
  // source gives back: the growth, plus the engine's staging (its budget, or the bytes the move
  // sends and receives if fewer).
  static std::size_t memory_beyond_source(std::size_t src, std::size_t dst, std::uint64_t moved);

  // ---- recovery from a lost process (trainer_recover.cc) ----
  std::shared_ptr<const edm::Communicators> take_survivors_world(std::unique_ptr<comm::Transport> w,
                                                                 const vps::ParallelConfig& next);
  std::unique_ptr<PendingSwitch> plan_recovery(const vps::ParallelConfig& from, const vps::ParallelConfig& next,
                                               const std::vector<int>& held, bool with_copies);

  // ---- redundancy 2 (trainer_copies.cc) ----
  void hold_copies(const std::vector<std::string>& node_of_process);
  void release_copies();
  std::vector<plan::SwitchPlacement::Copy> copy_sources(const std::vector<int>& held) const;
  int choose_lookahead(double prepare_s) const;
  SwitchStats commit(std::string leader_state);
  void carry_progress(comm::Transport& tw, const edm::Prepared& p, std::string& leader_state, SwitchStats& st);
  void move_state(comm::Transport& tw, const edm::Prepared& p, CommitFigures& mine, SwitchStats& st);
  TransferResult run_engine(comm::Transport& tw, Arenas& next_arenas, SwitchStats::Phases& ph);
  TransferResult run_gather(comm::Transport& tw, Arenas& next_arenas);
  void take_gradients(Arenas& next_arenas);
  void zero_stale_gradients();

  // ---- report (trainer_report.cc) ----
  void report_commit(comm::Transport& tw, const edm::Prepared& p, CommitFigures& mine, SwitchStats& st);
  SwitchTraffic traffic(comm::Transport& tw, const std::vector<CommitFigures>& per_rank) const;

  // ---- probe (trainer_probe.cc) ----
  Trainer::Probe probe();
  void gather_logits(const std::vector<float>& logits, Trainer::Probe& p);
};

}  // namespace dynatrain::train
