#include "tools/run_transition_cli.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "common/clock.h"
#include "common/error.h"
#include "comm/probe.h"
#include "exec/machine_rates.h"
#include "exec/probe.h"
#include "job/fanout_switch.h"
#include "job/fault_injection.h"
#include "job/memory_check.h"
#include "testing/state_oracle.h"
#include "tools/run_transition_run.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"

namespace dynatrain::tools {
using namespace dynatrain::exec;  // the engine this command drives

namespace {

// Refuses a switch whose state cannot fit in this node's memory (job/memory_check.h).
// Per rank: max(src, dst) + staging (the engine's bound) + the bandwidth probe's buffers.
void check_memory_fits(comm::Transport& world, std::uint64_t src_bytes, std::uint64_t dst_bytes, std::uint64_t budget) {
  const std::uint64_t state = std::max(src_bytes, dst_bytes);
  job::check_node_memory(world, state + std::min(budget, state) + (std::uint64_t{128} << 20), "the switch",
                         "use more nodes, a smaller model or a smaller --mem-budget");
}

// Touches, as spare pages of `pool`, the memory the switch will take beyond what its source
// gives back: the peak the engine's dry run predicts for `plan` (collective: the wave agreement)
// minus this rank's source bytes, since the pool builds destination state in drained source
// pages first. That is at most max(0, dst - src) + budget, the bound's headroom, and often far
// less. With node-level fan-out the direct plan's dry run sizes it (same source and destination
// as the stages). Returns the bytes touched.
std::uint64_t prefault_for_switch(const plan::RankPlan& plan, const vps::RankLayout& src_rl,
                                  std::vector<std::byte*>& src, const vps::RankLayout& dst_rl, const vps::ElemBytes& eb,
                                  comm::Transport& world, PoolAllocator& pool, TransitionOptions opt) {
  opt.dry_only = true;
  std::vector<std::byte*> none;
  const TransitionStats dry = run_transition(plan, src_rl, src, dst_rl, none, eb, world, pool, opt);
  return pool.prefault(dry.predicted_peak_bytes > dry.src_bytes ? dry.predicted_peak_bytes - dry.src_bytes : 0);
}

PhaseSeconds phases_of(const TransitionStats& s) {
  return {s.keep_seconds,   s.pack_seconds,   s.wait_seconds,
          s.unpack_seconds, s.alloc_seconds,  s.agree_seconds,
          s.dry_seconds,    s.system_seconds, static_cast<double>(s.page_faults)};
}

}  // namespace

int run_transition_command(const RunTransitionArgs& args, comm::Transport& world, std::FILE* out) {
  RunTransition command(args, world, out);
  return command.run();
}

exec::TransitionOptions pool_options(const RunTransitionArgs& args) {
  exec::TransitionOptions o;
  o.mem_budget = static_cast<std::size_t>(args.mem_budget);
  o.keep_path = exec::parse_keep_path(args.keep_path);
  return o;
}

RunTransition::RunTransition(const RunTransitionArgs& args, comm::Transport& world, std::FILE* out)
    : args_(args), world_(world), out_(out), me_(world.rank()), root_(world.rank() == 0) {}

int RunTransition::run() {
  check_arguments();
  plan_switch();
  agree_deadline();
  prepare_state();
  run_rounds();
  gather_figures();
  testing::release_all(*dst_layout_, dst_rl_, b_, pool_);
  testing::release_all(*src_layout_, src_rl_, a_, pool_);
  measure_plain_exchange();
  if (root_) report();
  world_.barrier();
  return exit_code_;
}

void RunTransition::check_arguments() {
  if (args_.repeat < 1) DT_INPUT_ERROR("--repeat ", args_.repeat, " must be at least 1");
  fanout_mode_ = plan::parse_fanout_mode(args_.fanout);
  if (!args_.fanout_cluster.empty()) fanout_rates_ = job::fanout_costs(sim::cluster_from_spec(args_.fanout_cluster));
  model_ = vps::model_from_name(args_.model);
  const vps::ParallelConfig from = vps::ParallelConfig::parse(args_.from);
  const vps::ParallelConfig to = vps::ParallelConfig::parse(args_.to);
  lo_.kinds = vps::parse_state_kinds(args_.kinds);
  if (args_.bucket_elems > 0) lo_.bucket_elems = args_.bucket_elems;
  if (args_.align_pages) lo_.align_elems = vps::kPageAlignElems;
  src_layout_.emplace(model_, from, lo_);
  dst_layout_.emplace(model_, to, lo_);
  need_ = std::max(src_layout_->config().world_size(), dst_layout_->config().world_size());
  if (need_ > world_.size())
    DT_INPUT_ERROR("the switch ", src_layout_->config().str(), " -> ", dst_layout_->config().str(), " needs ", need_,
                   " ranks but the job has ", world_.size(), "; start it on ", need_,
                   " or more processes: `mpirun -np ", need_, " dynatrain run-transition ...`");
  if (root_ && !args_.json.empty()) json_file_.open(args_.json);
  if (!comm::agree_with_root(world_, args_.json.empty() || json_file_.is_open()))
    DT_INPUT_ERROR("cannot write --json file '", args_.json, "'");
  topo_.gpus_per_node = args_.gpus_per_node;
}

void RunTransition::plan_switch() {
  const vps::Layout &src = *src_layout_, &dst = *dst_layout_;
  // Which process takes each destination rank (plan/placement.h); the way back undoes it.
  placed_ = args_.placement == "auto" ? plan::auto_placement(src, dst, topo_) : plan::Placement::parse(args_.placement);
  // The switch runs on processes 0..need-1 (the others wait): a given placement puts each
  // destination rank on its own process among them (a permutation when both layouts are as large).
  placed_.validate(dst.config().world_size(), need_);
  fwd_planner_.emplace(src, dst, topo_, plan::SwitchPlacement{{}, placed_, {}});
  back_planner_.emplace(dst, src, topo_, plan::SwitchPlacement{placed_, {}, {}});
  fwd_ = me_ < need_ ? fwd_planner_->plan_rank(me_) : plan::RankPlan{me_, {}, {}, {}};
  back_ = me_ < need_ ? back_planner_->plan_rank(me_) : plan::RankPlan{me_, {}, {}, {}};
  src_rl_ = fwd_planner_->src_rank_layout(me_);
  dst_rl_ = fwd_planner_->dst_rank_layout(me_);
  const auto& eb = lo_.elem_bytes;
  // Node-level fan-out (--fanout): every process plans every process's part (plan_all), since
  // relay groups span a node; the rule's rates come from --fanout-cluster (default: A800-class).
  zeroed_ = args_.at_step_boundary ? kStepBoundaryKinds : 0;
  if (fanout_mode_ != plan::FanoutMode::kOff)
    fanout_ = plan::plan_fanout(*fwd_planner_, fwd_planner_->plan_all(), eb, fanout_mode_, fanout_rates_, zeroed_);
  mine_.inter_without = plan::inter_node_bytes_in(fwd_, topo_, eb, zeroed_);
  mine_.inter_sent_without = plan::inter_node_bytes_out(fwd_, topo_, eb, zeroed_);
  mine_.inter_with = fanout_.applied ? 0 : mine_.inter_without;
  if (fanout_.applied)
    for (const auto& stage : fanout_.stages)
      if (me_ < static_cast<int>(stage.size()))
        mine_.inter_with += plan::inter_node_bytes_in(stage[me_], topo_, eb, zeroed_);
}

// The memory check, and the deadline every rank arms for a round: a peer that stops answering
// mid-switch ends the job (job/watchdog.h); the deadline grows with the most state any rank
// holds before and after.
void RunTransition::agree_deadline() {
  std::uint64_t state = 0;
  for (const auto* rl : {&src_rl_, &dst_rl_})
    for (const auto& buf : rl->buffers) {
      const std::uint64_t bytes = static_cast<std::uint64_t>(buf.numel) * lo_.elem_bytes[static_cast<int>(buf.kind)];
      mine_.largest_buffer = std::max(mine_.largest_buffer, bytes);
      state += bytes;
    }
  check_memory_fits(world_, static_cast<std::uint64_t>(src_rl_.bytes(lo_)),
                    static_cast<std::uint64_t>(dst_rl_.bytes(lo_)), args_.mem_budget);
  const auto states = comm::all_gather_values(world_, state);
  switch_deadline_ = job::switch_timeout_seconds(*std::max_element(states.begin(), states.end()));
}

// The source state, filled by the content oracle; the bandwidth probe; the switch's options;
// and the prefault (default; --no-prefault skips it): what the elastic device manager's prepare
// does while training still runs, so the cold switch builds its destination in warm pages.
// Timed apart as prepare_seconds.
void RunTransition::prepare_state() {
  a_ = testing::allocate_filled(*src_layout_, src_rl_, pool_);
  exec::machine_rates();  // measured once per process, before any switch is timed
  bw_ = comm::measure_p2p_bandwidth(world_, probe_bytes());
  opt_.mem_budget = args_.mem_budget;
  opt_.topology = topo_;
  if (args_.at_step_boundary) opt_.zeroed_kinds = kStepBoundaryKinds;
  opt_.direct_runs = args_.direct_runs;
  opt_.overlap_links = exec::parse_link_overlap(args_.overlap_links);
  opt_.rounds_in_flight = args_.rounds_in_flight;
  opt_.keep_path = exec::parse_keep_path(args_.keep_path);
  opt_.progress = &progress_;
  if (!args_.prefault) return;
  world_.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  mine_.prefaulted = prefault_for_switch(fwd_, src_rl_, a_, dst_rl_, lo_.elem_bytes, world_, pool_, opt_);
  mine_.prepare_s = seconds_since(t0);
}

// The point-to-point probe's message: as many bytes as the busiest rank receives in the switch,
// within [1 MiB, 64 MiB] (a probe at the switch's own scale; no 64 MiB of fresh pages for a
// switch of kilobytes). Equal on every rank.
std::size_t RunTransition::probe_bytes() {
  std::uint64_t received = 0;
  for (const auto& [q, v] : fwd_.recv)
    for (const auto& p : v) received += p.box.numel() * lo_.elem_bytes[static_cast<int>(p.kind)];
  const auto all = comm::all_gather_values(world_, received);
  constexpr std::uint64_t kMin = 1 << 20, kMax = 64 << 20;
  return static_cast<std::size_t>(std::clamp(*std::max_element(all.begin(), all.end()), kMin, kMax));
}

// K forward switches; from the second on, the state is switched back first. --verify checks
// every element after the first and the last; a failure ends the rounds (exit code 1).
void RunTransition::run_rounds() {
  const auto& eb = lo_.elem_bytes;
  for (int k = 0; k < args_.repeat; ++k) {
    // Armed for the whole round (switch back, switch, verify): a peer that stops while this
    // rank waits in any of them ends the job.
    watchdog_.arm("switch round " + std::to_string(k + 1) + " (" + src_layout_->config().str() + " -> " +
                      dst_layout_->config().str() + ")",
                  switch_deadline_, {}, &progress_);
    RoundSeconds round;
    if (k > 0) {
      world_.barrier();
      a_.clear();
      round.back = run_transition(back_, dst_rl_, b_, src_rl_, a_, eb, world_, pool_, opt_).seconds;
    }
    world_.barrier();
    job::fault_point("switch", me_);
    const auto s = fanout_.applied ? job::run_fanout_switch(fanout_, src_rl_, a_, dst_rl_, b_, eb, world_, pool_, opt_,
                                                            &round.stage1)
                                   : run_transition(fwd_, src_rl_, a_, dst_rl_, b_, eb, world_, pool_, opt_);
    forward_.push_back(s);
    round.forward = s.seconds;
    rounds_.push_back(round);
    if (args_.verify && (k == 0 || k == args_.repeat - 1)) {
      if (!verify(k == 0 ? "first" : "last")) {
        verify_text_ = "failed";
        exit_code_ = 1;
        break;
      }
      verify_text_ = "ok";
    }
    watchdog_.disarm();
  }
  watchdog_.disarm();  // after a failed verify's break
}

// Collective: every rank checks every element of its destination state; the first rank with a
// wrong one prints it. Returns whether all were right (equal on every rank).
bool RunTransition::verify(const char* when) {
  std::string first;
  const int bad = testing::verify_state(*dst_layout_, dst_rl_, b_, &first, opt_.zeroed_kinds);
  const auto bads = comm::all_gather_values(world_, static_cast<std::uint64_t>(bad));
  const auto it = std::find_if(bads.begin(), bads.end(), [](std::uint64_t v) { return v > 0; });
  if (it == bads.end()) return true;
  if (static_cast<int>(it - bads.begin()) == me_)
    std::fprintf(out_, "verify: FAILED after the %s switch on rank %d: %s\n", when, me_, first.c_str());
  std::fflush(out_);
  world_.barrier();
  return false;
}

// Collective: this rank's figures of the cold (first) switch, the warm ones (the others) and
// the pool, gathered with the per-round seconds (each round's slowest rank).
void RunTransition::gather_figures() {
  const TransitionStats& cold = forward_.front();
  RankFigures& m = mine_;
  m.received = cold.bytes_received, m.sent = cold.bytes_sent, m.messages = cold.messages;
  m.sent_direct = cold.bytes_sent_direct, m.received_direct = cold.bytes_received_direct;
  m.committed_ahead = cold.committed_ahead_bytes;
  m.kept = cold.bytes_kept, m.kept_zero_copy = cold.kept_zero_copy_bytes, m.kept_remapped = cold.kept_remapped_bytes;
  m.saved_sent = cold.skipped_bytes_sent, m.saved_kept = cold.skipped_bytes_kept;
  m.peak = cold.peak_bytes, m.overlapped = cold.overlapped_rounds, m.src = cold.src_bytes, m.dst = cold.dst_bytes;
  for (std::size_t k = 1; k < forward_.size(); ++k) m.warm_peak = std::max(m.warm_peak, forward_[k].peak_bytes);
  m.pool_fresh = pool_.fresh_bytes(), m.pool_reserved = pool_.peak_reserved();
  m.mapped_bytes = pool_.mapped_block_bytes(), m.huge_bytes = pool_.huge_page_bytes();
  m.cold_phases = phases_of(cold);
  m.warm_phases = phases_of(forward_.back());
  all_ = comm::all_gather_values(world_, mine_);
  const auto rounds = comm::all_gather_values(world_, rounds_);  // rank r's rounds at r * rounds_.size()
  const std::size_t n = rounds_.size();
  for (std::size_t k = 0; k < n; ++k) {
    RoundSeconds slowest{0, 0, 0};
    for (int r = 0; r < world_.size(); ++r) {
      const RoundSeconds& x = rounds[static_cast<std::size_t>(r) * n + k];
      slowest = {std::max(slowest.forward, x.forward), std::max(slowest.back, x.back),
                 std::max(slowest.stage1, x.stage1)};
    }
    forward_secs_.push_back(slowest.forward);
    if (k > 0) back_secs_.push_back(slowest.back);
    if (fanout_.applied) fanout_stage1_secs_.push_back(slowest.stage1);
  }
  // Whether the transport moves scattered runs unpacked at all (c10d never; MPI where attach works).
  runs_direct_available_ = world_.size() < 2 || world_.runs_direct((world_.rank() + 1) % world_.size());
}

// The link alone with this switch's bytes (same peers, order and chunks, plain messages, warm
// buffers): the floor the engine is compared with where the bandwidth probe is not reachable.
// Then the simulator's prediction for this switch from rates measured now (--json only: it
// costs a trace).
void RunTransition::measure_plain_exchange() {
  const auto& eb = lo_.elem_bytes;
  std::vector<std::uint64_t> to_peer(static_cast<std::size_t>(world_.size()), 0), from_peer(to_peer);
  auto moved = [&](const plan::Piece& p) {
    return (opt_.zeroed_kinds >> static_cast<int>(p.kind)) & 1u ? 0 : p.box.numel() * eb[static_cast<int>(p.kind)];
  };
  for (const auto& [q, v] : fwd_.send)
    for (const auto& p : v) to_peer[static_cast<std::size_t>(q)] += moved(p);
  for (const auto& [q, v] : fwd_.recv)
    for (const auto& p : v) from_peer[static_cast<std::size_t>(q)] += moved(p);
  const std::size_t chunk = static_cast<std::size_t>(std::max<std::uint64_t>(forward_.front().chunk_bytes, 4096));
  // Five times: the bare exchange is the fastest (the floor), the model's link is calibrated on
  // the median, as the warm switch it predicts is a median.
  auto exchanges = exec::measure_plain_exchange(world_, to_peer, from_peer, chunk, 5);
  std::sort(exchanges.begin(), exchanges.end());
  exchange_s_ = exchanges.front(), exchange_median_s_ = exchanges[2];
  if (!args_.json.empty()) predicted_ = predict_switch(world_, *fwd_planner_, eb, opt_, {chunk, exchange_median_s_});
}

template <typename T>
T RunTransition::max_of(T RankFigures::*field) const {
  T best = all_.front().*field;
  for (const auto& r : all_) best = std::max(best, r.*field);
  return best;
}
template std::uint64_t RunTransition::max_of(std::uint64_t RankFigures::*) const;
template double RunTransition::max_of(double RankFigures::*) const;

std::uint64_t RunTransition::sum_of(std::uint64_t RankFigures::*field) const {
  std::uint64_t sum = 0;
  for (const auto& r : all_) sum += r.*field;
  return sum;
}

}  // namespace dynatrain::tools
