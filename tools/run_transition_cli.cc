#include "tools/run_transition_cli.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>


#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "common/error.h"
#include "testing/state_oracle.h"
#include "exec/pool_allocator.h"
#include "plan/fanout.h"
#include "plan/planner.h"
#include "vps/model_spec.h"
#include "vps/parallel_config.h"
#include "job/fanout_switch.h"
#include "job/fault_injection.h"
#include "job/memory_check.h"
#include "job/mpi_world.h"
#include "common/output_file.h"
#include "tools/predict_switch.h"
#include "job/watchdog.h"
#include "common/clock.h"

namespace dynatrain::tools {
using namespace dynatrain::testing;  // the state oracle (testing/state_oracle.h)
using namespace dynatrain::exec;  // the engine this command drives

namespace {

// Refuses a switch whose state cannot fit in this node's memory (job/memory_check.h).
// Per rank: max(src, dst) + staging (the engine's bound) + the bandwidth probe's buffers.
void check_memory_fits(comm::Transport& world, std::uint64_t src_bytes, std::uint64_t dst_bytes,
                       std::uint64_t budget) {
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
std::uint64_t prefault_for_switch(const plan::RankPlan& plan, const vps::RankLayout& src_rl, std::vector<std::byte*>& src,
                                  const vps::RankLayout& dst_rl, const vps::ElemBytes& eb, comm::Transport& world,
                                  PoolAllocator& pool, TransitionOptions opt) {
  opt.dry_only = true;
  std::vector<std::byte*> none;
  const TransitionStats dry = run_transition(plan, src_rl, src, dst_rl, none, eb, world, pool, opt);
  return pool.prefault(dry.predicted_peak_bytes > dry.src_bytes ? dry.predicted_peak_bytes - dry.src_bytes : 0);
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
std::uint64_t max_of(const std::vector<std::uint64_t>& v) { return *std::max_element(v.begin(), v.end()); }
std::uint64_t sum_of(const std::vector<std::uint64_t>& v) { return std::accumulate(v.begin(), v.end(), std::uint64_t{0}); }

}  // namespace

int run_transition_command(const RunTransitionArgs& args, comm::Transport& world, std::FILE* out) {
  // ---- arguments (identical on every rank, so every rank throws the same InputError) ----
  if (args.repeat < 1) DT_INPUT_ERROR("--repeat ", args.repeat, " must be at least 1");
  const plan::FanoutMode fanout_mode = plan::parse_fanout_mode(args.fanout);
  const plan::FanoutCosts fanout_rates =
      args.fanout_cluster.empty() ? plan::FanoutCosts{} : job::fanout_costs(sim::cluster_from_spec(args.fanout_cluster));
  const vps::ModelSpec model = vps::model_from_name(args.model);
  vps::ParallelConfig from = vps::ParallelConfig::parse(args.from);
  vps::ParallelConfig to = vps::ParallelConfig::parse(args.to);
  vps::LayoutOptions lo;
  lo.kinds = vps::parse_state_kinds(args.kinds);
  if (args.bucket_elems > 0) lo.bucket_elems = args.bucket_elems;
  if (args.align_pages) lo.align_elems = vps::kPageAlignElems;
  const vps::Layout src_layout(model, from, lo), dst_layout(model, to, lo);
  const int need = std::max(src_layout.config().world_size(), dst_layout.config().world_size());
  if (need > world.size())
    DT_INPUT_ERROR("the switch ", src_layout.config().str(), " -> ", dst_layout.config().str(), " needs ", need,
                   " ranks but the job has ", world.size(), "; start it with mpirun -np ", need, " or more");
  const int me = world.rank();
  const bool root = me == 0;
  std::ofstream json_file;  // opened now, so a bad path fails before any work, on every rank
  if (root && !args.json.empty()) json_file.open(args.json);
  if (!comm::agree_with_root(world, args.json.empty() || json_file.is_open()))
    DT_INPUT_ERROR("cannot write --json file '", args.json, "'");
  plan::Topology topo;
  topo.gpus_per_node = args.gpus_per_node;

  // ---- plans, state ----
  // Which process takes each destination rank (plan/placement.h); the way back undoes it.
  const plan::Placement placed = args.placement == "auto" ? plan::auto_placement(src_layout, dst_layout, topo)
                                                          : plan::Placement::parse(args.placement);
  // The switch runs on processes 0..need-1 (the others wait): a given placement puts each
  // destination rank on its own process among them (a permutation when both layouts are as large).
  placed.validate(dst_layout.config().world_size(), need);
  const plan::Planner fwd_planner(src_layout, dst_layout, topo, {{}, placed}),
      back_planner(dst_layout, src_layout, topo, {placed, {}});
  const plan::RankPlan fwd = me < need ? fwd_planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  const plan::RankPlan back = me < need ? back_planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  const vps::RankLayout src_rl = fwd_planner.src_rank_layout(me), dst_rl = fwd_planner.dst_rank_layout(me);
  const auto& eb = lo.elem_bytes;
  // Node-level fan-out (--fanout): every process plans every process's part (plan_all), since
  // relay groups span a node; the rule's rates come from --fanout-cluster (default: A800-class).
  const std::uint32_t zeroed = args.at_step_boundary ? kStepBoundaryKinds : 0;
  const plan::FanoutPlan fanout =
      fanout_mode == plan::FanoutMode::kOff
          ? plan::FanoutPlan{}
          : plan::plan_fanout(fwd_planner, fwd_planner.plan_all(), eb, fanout_mode, fanout_rates, zeroed);
  const auto inter_without = gather_u64(world, plan::inter_node_bytes_in(fwd, topo, eb, zeroed));
  const auto inter_sent_without = gather_u64(world, plan::inter_node_bytes_out(fwd, topo, eb, zeroed));
  std::uint64_t inter_local = fanout.applied ? 0 : plan::inter_node_bytes_in(fwd, topo, eb, zeroed);
  if (fanout.applied)
    for (const auto& stage : fanout.stages)
      if (me < static_cast<int>(stage.size())) inter_local += plan::inter_node_bytes_in(stage[me], topo, eb, zeroed);
  const auto inter_with = gather_u64(world, inter_local);  // every stage's

  std::uint64_t largest_local = 0, state_local = 0;
  for (const auto* rl : {&src_rl, &dst_rl})
    for (const auto& buf : rl->buffers) {
      const std::uint64_t bytes = static_cast<std::uint64_t>(buf.numel) * eb[static_cast<int>(buf.kind)];
      largest_local = std::max(largest_local, bytes);
      state_local += bytes;
    }
  check_memory_fits(world, static_cast<std::uint64_t>(src_rl.bytes(lo)), static_cast<std::uint64_t>(dst_rl.bytes(lo)),
                    args.mem_budget);
  const auto largest_all = gather_u64(world, largest_local);
  const std::uint64_t largest = *std::max_element(largest_all.begin(), largest_all.end());
  // A peer that stops answering mid-switch ends the job (job/watchdog.h); the deadline grows
  // with the most state any rank holds before and after.
  const auto state_all = gather_u64(world, state_local);
  const double switch_deadline = job::switch_timeout_seconds(*std::max_element(state_all.begin(), state_all.end()));
  job::Watchdog watchdog;

  PoolAllocator pool;
  std::vector<std::byte*> a = allocate_filled(src_layout, src_rl, pool), b;

  const double bw = measure_p2p_bandwidth(world, std::size_t{64} << 20);

  TransitionOptions opt;
  opt.mem_budget = args.mem_budget;
  opt.topology = topo;
  if (args.at_step_boundary) opt.zeroed_kinds = kStepBoundaryKinds;
  opt.direct_runs = args.direct_runs;
  opt.overlap_links = exec::parse_link_overlap(args.overlap_links);
  opt.rounds_in_flight = args.rounds_in_flight;

  // Prefault (default; --no-prefault skips it): what the elastic device manager's prepare does
  // while training still runs, so the cold switch builds its destination in warm pages. Timed
  // apart as prepare_seconds.
  double prepare_local = 0;
  std::uint64_t prefaulted_local = 0;
  if (args.prefault) {
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    prefaulted_local = prefault_for_switch(fwd, src_rl, a, dst_rl, eb, world, pool, opt);
    prepare_local = seconds_since(t0);
  }
  const double prepare_s = max_of(gather_double(world, prepare_local));
  const std::uint64_t prefaulted = max_of(gather_u64(world, prefaulted_local));

  std::vector<TransitionStats> forward;
  std::vector<double> forward_secs, back_secs, fanout_stage1_secs;
  std::string verify_text = "skipped";
  int exit_code = 0;
  auto check = [&](const char* when) {
    std::string first;
    const int bad = verify_state(dst_layout, dst_rl, b, &first, opt.zeroed_kinds);
    const auto bads = gather_u64(world, static_cast<std::uint64_t>(bad));
    const auto it = std::find_if(bads.begin(), bads.end(), [](std::uint64_t v) { return v > 0; });
    if (it == bads.end()) return true;
    if (static_cast<int>(it - bads.begin()) == me)
      std::fprintf(out, "verify: FAILED after the %s switch on rank %d: %s\n", when, me, first.c_str());
    std::fflush(out);
    world.barrier();
    return false;
  };
  for (int k = 0; k < args.repeat; ++k) {
    // Armed for the whole round (switch back, switch, gathers, verify): a peer that stops while
    // this rank waits in any of them ends the job.
    watchdog.arm("switch round " + std::to_string(k + 1) + " (" + src_layout.config().str() + " -> " +
                     dst_layout.config().str() + ")", switch_deadline);
    if (k > 0) {
      world.barrier();
      a.clear();
      const auto s = run_transition(back, dst_rl, b, src_rl, a, eb, world, pool, opt);
      back_secs.push_back(max_of(gather_double(world, s.seconds)));
    }
    world.barrier();
    job::fault_point("switch", me);
    double stage1 = 0;
    const auto s = fanout.applied ? job::run_fanout_switch(fanout, src_rl, a, dst_rl, b, eb, world, pool, opt, &stage1)
                                  : run_transition(fwd, src_rl, a, dst_rl, b, eb, world, pool, opt);
    forward.push_back(s);
    if (fanout.applied) fanout_stage1_secs.push_back(max_of(gather_double(world, stage1)));
    forward_secs.push_back(max_of(gather_double(world, s.seconds)));
    if (args.verify && (k == 0 || k == args.repeat - 1)) {
      if (!check(k == 0 ? "first" : "last")) {
        verify_text = "failed";
        exit_code = 1;
        break;
      }
      verify_text = "ok";
    }
    watchdog.disarm();
  }
  watchdog.disarm();  // after a failed verify's break

  // ---- figures: the cold (first) switch, warm (the others) ----
  const TransitionStats& cold = forward.front();
  const auto received = gather_u64(world, cold.bytes_received);
  const auto sent = gather_u64(world, cold.bytes_sent);
  const auto messages = gather_u64(world, cold.messages);
  const auto sent_direct = gather_u64(world, cold.bytes_sent_direct);
  // Whether the transport moves scattered runs unpacked at all (c10d never; MPI where attach works).
  const bool runs_direct_available = world.size() < 2 || world.runs_direct((world.rank() + 1) % world.size());
  const auto received_direct = gather_u64(world, cold.bytes_received_direct);
  const auto kept = gather_u64(world, cold.bytes_kept);
  const auto kept_zero_copy = gather_u64(world, cold.kept_zero_copy_bytes);
  const auto kept_remapped = gather_u64(world, cold.kept_remapped_bytes);
  const auto saved_sent = gather_u64(world, cold.skipped_bytes_sent);
  const auto saved_kept = gather_u64(world, cold.skipped_bytes_kept);
  const auto peaks = gather_u64(world, cold.peak_bytes);
  const auto overlapped = gather_u64(world, cold.overlapped_rounds);
  std::uint64_t warm_peak_local = 0;
  for (std::size_t k = 1; k < forward.size(); ++k) warm_peak_local = std::max(warm_peak_local, forward[k].peak_bytes);
  const auto warm_peaks = gather_u64(world, warm_peak_local);
  const auto srcb = gather_u64(world, cold.src_bytes);
  const auto dstb = gather_u64(world, cold.dst_bytes);
  const auto fresh = gather_u64(world, pool.fresh_bytes());
  const auto reserved = gather_u64(world, pool.peak_reserved());
  bool within = true;
  for (int r = 0; r < world.size(); ++r)
    within &= peaks[r] <= std::max(srcb[r], dstb[r]) + args.mem_budget;
  const double lower = bw > 0 ? static_cast<double>(max_of(received)) / bw : 0.0;
  const double cold_s = forward_secs.front();
  double warm_mean = 0, warm_min = 0;
  if (forward_secs.size() > 1) {
    warm_min = *std::min_element(forward_secs.begin() + 1, forward_secs.end());
    warm_mean = std::accumulate(forward_secs.begin() + 1, forward_secs.end(), 0.0) / (forward_secs.size() - 1);
  }
  // Per phase of the cold switch, and of the last warm one: the largest over ranks.
  auto phases_of = [&](const TransitionStats& s) {
    nlohmann::json p;
    p["keep"] = max_of(gather_double(world, s.keep_seconds));
    p["pack"] = max_of(gather_double(world, s.pack_seconds));
    p["wait"] = max_of(gather_double(world, s.wait_seconds));
    p["unpack"] = max_of(gather_double(world, s.unpack_seconds));
    p["alloc"] = max_of(gather_double(world, s.alloc_seconds));
    p["agree"] = max_of(gather_double(world, s.agree_seconds));
    p["dry"] = max_of(gather_double(world, s.dry_seconds));
    return p;
  };
  const nlohmann::json phases = phases_of(cold);
  const nlohmann::json warm_phases = phases_of(forward.back());
  release_all(dst_layout, dst_rl, b, pool);
  release_all(src_layout, src_rl, a, pool);
  // The link alone with this switch's bytes (same peers, order and chunks, plain messages, warm
  // buffers): the floor the engine is compared with where the bandwidth probe is not reachable.
  std::vector<std::uint64_t> to_peer(static_cast<std::size_t>(world.size()), 0), from_peer(to_peer);
  auto moved = [&](const plan::Piece& p) {
    return (opt.zeroed_kinds >> static_cast<int>(p.kind)) & 1u ? 0 : p.box.numel() * eb[static_cast<int>(p.kind)];
  };
  for (const auto& [q, v] : fwd.send) for (const auto& p : v) to_peer[static_cast<std::size_t>(q)] += moved(p);
  for (const auto& [q, v] : fwd.recv) for (const auto& p : v) from_peer[static_cast<std::size_t>(q)] += moved(p);
  const std::size_t chunk = static_cast<std::size_t>(std::max<std::uint64_t>(cold.chunk_bytes, 4096));
  // Five times: the bare exchange is the fastest (the floor), the model's link is calibrated on
  // the median, as the warm switch it predicts is a median.
  std::vector<double> exchanges;
  for (int i = 0; i < 5; ++i) exchanges.push_back(measure_plain_exchange(world, to_peer, from_peer, chunk));
  std::sort(exchanges.begin(), exchanges.end());
  const double exchange_s = exchanges.front(), exchange_median_s = exchanges[2];
  // The simulator's prediction for this switch from rates measured now (--json only: it costs a trace).
  const std::optional<SwitchPrediction> predicted =
      args.json.empty() ? std::nullopt : std::optional(predict_switch(world, fwd_planner, eb, opt, {chunk, exchange_median_s}));

  if (root) {
    nlohmann::json j;
    j["model"] = model.name;
    j["from"] = src_layout.config().str();
    j["to"] = dst_layout.config().str();
    j["ranks"] = world.size();
    j["backend"] = world.backend();
    j["seconds"] = cold_s;
    j["cold_seconds"] = cold_s;
    j["warm_repeats"] = forward_secs.size() - 1;
    j["warm_seconds"] = warm_mean;
    j["warm_min_seconds"] = warm_min;
    j["forward_seconds"] = forward_secs;  // every forward switch, the cold one first
    j["back_seconds"] = back_secs;
    j["bytes_moved"] = sum_of(sent);
    j["direct_runs"] = args.direct_runs;
    j["runs_direct_available"] = runs_direct_available;  // false: the transport packs every scattered message
    j["overlap_links"] = args.overlap_links;
    j["link_classes"] = cold.link_classes;  // 2: one pipeline per link class (exec::LinkOverlap)
    j["overlapped_rounds"] = sum_of(overlapped);
    j["rounds_in_flight"] = cold.rounds_in_flight;  // per link class
    j["bytes_sent_direct"] = sum_of(sent_direct);          // not packed
    j["bytes_received_direct"] = sum_of(received_direct);  // not unpacked
    j["max_rank_bytes_received"] = max_of(received);
    j["p2p_bandwidth_bytes_per_s"] = bw;
    j["lower_bound_seconds"] = lower;
    j["plain_exchange_seconds"] = exchange_s;  // the same bytes, plain messages (best of 5)
    j["plain_exchange_median_seconds"] = exchange_median_s;  // their median (the model's link)
    j["ratio"] = lower > 0 ? cold_s / lower : 0.0;
    j["warm_ratio"] = lower > 0 && warm_mean > 0 ? warm_mean / lower : 0.0;
    j["peak_bytes"] = max_of(peaks);
    j["warm_peak_bytes"] = max_of(warm_peaks);
    j["budget_bytes"] = args.mem_budget;
    j["max_src_bytes"] = max_of(srcb);
    j["max_dst_bytes"] = max_of(dstb);
    j["peak_within_bound"] = within;
    j["pool_fresh_bytes_max"] = max_of(fresh);
    j["pool_peak_reserved_max"] = max_of(reserved);
    j["messages_max_per_rank"] = max_of(messages);
    j["messages_total"] = sum_of(messages);
    j["waves"] = cold.waves;
    j["wave_order"] = cold.wave_order;
    j["bytes_kept"] = sum_of(kept);
    j["kept_zero_copy_bytes"] = sum_of(kept_zero_copy);  // handed over, not copied
    j["kept_zero_copy_share"] = sum_of(kept) > 0 ? static_cast<double>(sum_of(kept_zero_copy)) / sum_of(kept) : 0.0;
    j["kept_remapped_bytes"] = sum_of(kept_remapped);  // whole pages moved by mremap, not copied
    j["kept_not_copied_share"] =
        sum_of(kept) > 0 ? static_cast<double>(sum_of(kept_zero_copy) + sum_of(kept_remapped)) / sum_of(kept) : 0.0;
    j["align_pages"] = args.align_pages;
    j["at_step_boundary"] = args.at_step_boundary;
    j["saved_bytes_moved"] = sum_of(saved_sent);   // not sent: zeroed kinds (--at-step-boundary)
    j["saved_bytes_kept"] = sum_of(saved_kept);    // not copied locally
    j["prefault"] = args.prefault;
    j["prepare_seconds"] = prepare_s;
    j["prefaulted_bytes"] = prefaulted;  // max over ranks
    j["granule_bytes"] = cold.granule_bytes;
    j["pagewise_buffers"] = cold.pagewise_buffers;
    j["phases"] = phases;                         // cold switch, max over ranks per phase
    if (forward.size() > 1) j["warm_phases"] = warm_phases;  // last warm switch
    j["path"] = cold.path;
    j["fanout_bytes"] = cold.fanout_bytes;
    j["fanout"] = plan::fanout_mode_name(fanout_mode);  // --fanout
    j["fanout_applied"] = fanout.applied;
    j["fanout_reason"] = fanout.reason;
    j["inter_node_bytes"] = sum_of(inter_with);  // what crossed nodes (--gpus-per-node)
    j["inter_node_bytes_without_fanout"] = sum_of(inter_without);
    // The stages (1 when not applied), relay and tree groups, and the busiest process's bytes
    // sent to other nodes over all stages (a tree lowers it; plan/fanout.h). 0 groups when off.
    j["fanout_stages"] = fanout.applied ? fanout.stages.size() : std::size_t{1};
    j["fanout_relay_groups"] = fanout.groups;
    j["fanout_tree_candidates"] = fanout.tree_candidates;
    j["fanout_tree_groups"] = fanout.tree_groups;
    j["fanout_tree_bytes"] = fanout.tree_bytes;  // tree hops sent by a receiver, not the source
    j["inter_node_max_send_bytes"] = fanout_mode == plan::FanoutMode::kOff ? max_of(inter_sent_without)
                                                                           : fanout.max_sender_bytes;
    j["inter_node_max_send_bytes_without_fanout"] = max_of(inter_sent_without);
    // Per forward switch: when the last process finished stage 1 (seconds minus this is the later
    // stages after every process left stage 1; a process that finishes stage 1 early waits in stage 2).
    j["fanout_stage1_seconds"] = fanout_stage1_secs;
    j["verify"] = verify_text;
    j["placement"] = placed.str();
    j["largest_buffer_bytes"] = largest;
    if (predicted) {
      j["predicted_seconds"] = predicted->result.seconds;  // compare with warm_seconds (warm pool)
      j["predicted_cluster"] = sim::to_json(predicted->cluster);
      j["predicted_cpu_cores"] = predicted->cpu_cores;
      j["predicted_run_bytes"] = predicted->run_bytes;      // mean run of scattered direct messages
      j["predicted_run_seconds"] = predicted->run_seconds;  // measured cost of one such run
      j["predicted_probe_link_gb_per_s"] = predicted->probe_link / 1e9;  // before calibration on the plain exchange
      j["predicted_probe_link_seconds"] = predicted->probe_link_seconds;   // the prediction with that rate
      j["predicted_idle_latency_us"] = predicted->idle_latency * 1e6;  // ping-pong with nothing else running
      j["predicted_busy_handoff_us"] = predicted->busy_handoff * 1e6;  // a handshake while all copy
      j["predicted_idle_latency_seconds"] = predicted->idle_latency_seconds;  // the prediction with the idle one
      j["predicted_message_shape"] = {{"bytes", predicted->message_bytes},  // the probe's messages
                                      {"send_runs", predicted->send_runs},
                                      {"recv_runs", predicted->recv_runs}};
      j["predicted_without_runs_seconds"] = predicted->without_runs_seconds;  // the same, runs free
    }
    std::fprintf(out, "run-transition %s: %s -> %s on %d ranks (%s), budget %s\n", model.name.c_str(),
                 src_layout.config().str().c_str(), dst_layout.config().str().c_str(), world.size(),
                 world.backend(), format_bytes(static_cast<double>(args.mem_budget)).c_str());
    if (!runs_direct_available)
      std::fprintf(out, "  direct runs          none on the %s transport (no cross-memory reads): scattered messages packed\n",
                   world.backend());
    if (args.at_step_boundary)
      std::fprintf(out, "  at step boundary     grads zeroed in the new layout: %s not sent, %s not copied\n",
                   format_bytes(static_cast<double>(sum_of(saved_sent))).c_str(),
                   format_bytes(static_cast<double>(sum_of(saved_kept))).c_str());
    if (args.prefault)
      std::fprintf(out, "  prepare_seconds      %.6f (prefault of %s before the switch; --no-prefault: none)\n",
                   prepare_s, format_bytes(static_cast<double>(prefaulted)).c_str());
    std::fprintf(out, "  seconds              %.6f (cold)\n", cold_s);
    if (forward_secs.size() > 1)
      std::fprintf(out, "  warm seconds         %.6f mean, %.6f min over %zu repeats\n", warm_mean, warm_min,
                   forward_secs.size() - 1);
    std::fprintf(out, "  bytes_moved          %s (max into one rank %s)\n", format_bytes(static_cast<double>(sum_of(sent))).c_str(),
                 format_bytes(static_cast<double>(max_of(received))).c_str());
    std::fprintf(out, "  bytes kept           %s (not copied: %s in buffers handed over, %s in remapped pages)\n",
                 format_bytes(static_cast<double>(sum_of(kept))).c_str(),
                 format_bytes(static_cast<double>(sum_of(kept_zero_copy))).c_str(),
                 format_bytes(static_cast<double>(sum_of(kept_remapped))).c_str());
    std::fprintf(out, "  p2p bandwidth        %s/s per rank (all pairs at once)\n", format_bytes(bw).c_str());
    std::fprintf(out, "  lower_bound_seconds  %.6f\n", lower);
    std::fprintf(out, "  plain exchange       %.6f s (the same bytes and peers as plain messages)\n", exchange_s);
    if (predicted) std::fprintf(out, "  predicted_seconds    %.6f (simulator, this machine's rates)\n", predicted->result.seconds);
    std::fprintf(out, "  ratio                %.2f cold", lower > 0 ? cold_s / lower : 0.0);
    if (warm_mean > 0 && lower > 0) std::fprintf(out, ", %.2f warm", warm_mean / lower);
    std::fprintf(out, "\n");
    std::fprintf(out, "  peak_bytes           %s (max source %s, max destination %s, within max(src,dst)+budget: %s)\n",
                 format_bytes(static_cast<double>(max_of(peaks))).c_str(), format_bytes(static_cast<double>(max_of(srcb))).c_str(),
                 format_bytes(static_cast<double>(max_of(dstb))).c_str(), within ? "yes" : "NO");
    std::fprintf(out, "  messages             %llu max per rank, %llu total; %llu waves, %s order; path %s\n",
                 static_cast<unsigned long long>(max_of(messages)), static_cast<unsigned long long>(sum_of(messages)),
                 static_cast<unsigned long long>(cold.waves), cold.wave_order.c_str(), cold.path.c_str());
    std::fprintf(out, "  phases (max over ranks, s)  keep %.4f  pack %.4f  wait %.4f  unpack %.4f  alloc %.4f  agree %.4f  dry %.4f\n",
                 phases["keep"].get<double>(), phases["pack"].get<double>(), phases["wait"].get<double>(),
                 phases["unpack"].get<double>(), phases["alloc"].get<double>(), phases["agree"].get<double>(),
                 phases["dry"].get<double>());
    std::fprintf(out, "  inter-node bytes     %s (%s without fan-out); fan-out %s\n",
                 format_bytes(static_cast<double>(sum_of(inter_with))).c_str(),
                 format_bytes(static_cast<double>(sum_of(inter_without))).c_str(),
                 fanout_mode == plan::FanoutMode::kOff ? "off" : fanout.reason.c_str());
    if (fanout.tree_groups > 0)
      std::fprintf(out, "  fan-out tree         %llu groups, %zu stages; busiest sender to other nodes %s (%s without)\n",
                   static_cast<unsigned long long>(fanout.tree_groups), fanout.stages.size(),
                   format_bytes(static_cast<double>(fanout.max_sender_bytes)).c_str(),
                   format_bytes(static_cast<double>(fanout.max_sender_bytes_without)).c_str());
    if (!placed.is_identity())
      std::fprintf(out, "  placement            %s (%d of %d destination ranks on another process)\n",
                   placed.str().c_str(), placed.moved_ranks(dst_layout.config().world_size()),
                   dst_layout.config().world_size());
    if (verify_text == "ok") std::fprintf(out, "verify: ok\n");
    std::fflush(out);
    if (json_file.is_open()) {
      json_file << j.dump(2) << "\n";
      check_written(json_file, "--json", args.json);  // a full disk is an error, not a cut-off file
    }
  }
  world.barrier();
  return exit_code;
}

}  // namespace dynatrain::tools
