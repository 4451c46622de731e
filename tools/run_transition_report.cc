// RunTransition's report on rank 0: the --json record and the printed lines.
#include <algorithm>
#include <numeric>

#include "common/bytes.h"
#include "common/output_file.h"
#include "exec/machine_rates.h"
#include "tools/run_transition_run.h"

namespace dynatrain::tools {

namespace {

// The cold switch's seconds, and the warm ones' (switches 2..K) mean and minimum (0: none).
struct ColdWarm {
  double cold = 0, warm_mean = 0, warm_min = 0;
  std::size_t warm_repeats = 0;
};

ColdWarm cold_warm(const std::vector<double>& forward) {
  ColdWarm t;
  t.cold = forward.front();
  t.warm_repeats = forward.size() - 1;
  if (forward.size() > 1) {
    t.warm_min = *std::min_element(forward.begin() + 1, forward.end());
    t.warm_mean = std::accumulate(forward.begin() + 1, forward.end(), 0.0) / static_cast<double>(t.warm_repeats);
  }
  return t;
}

std::string bytes(std::uint64_t n) { return format_bytes(static_cast<double>(n)); }

}  // namespace

nlohmann::json RunTransition::phases_json(PhaseSeconds RankFigures::*which) const {
  auto max_phase = [&](double PhaseSeconds::*phase) {
    double best = (all_.front().*which).*phase;
    for (const auto& r : all_) best = std::max(best, (r.*which).*phase);
    return best;
  };
  return {{"keep", max_phase(&PhaseSeconds::keep)},         {"pack", max_phase(&PhaseSeconds::pack)},
          {"wait", max_phase(&PhaseSeconds::wait)},         {"unpack", max_phase(&PhaseSeconds::unpack)},
          {"alloc", max_phase(&PhaseSeconds::alloc)},       {"agree", max_phase(&PhaseSeconds::agree)},
          {"dry", max_phase(&PhaseSeconds::dry)},           {"system_seconds", max_phase(&PhaseSeconds::system)},
          {"page_faults", max_phase(&PhaseSeconds::faults)}};
}

// This machine's measured memory rates (exec/machine_rates.h, rank 0's: one machine) and the keep
// path the engine chose from them.
void RunTransition::add_machine_json(nlohmann::json& j) const {
  const exec::MachineRates& r = exec::machine_rates();
  const exec::TransitionStats& cold = forward_.front();
  j["keep_path"] = cold.keep_path;
  j["huge_pages"] = cold.huge_pages;
  j["thp_mode"] = exec::thp_mode_name(exec::thp_mode());
  const std::uint64_t mapped = sum_of(&RankFigures::mapped_bytes);
  j["huge_page_share"] = mapped > 0 ? static_cast<double>(sum_of(&RankFigures::huge_bytes)) / mapped : 0.0;
  j["remap_min_bytes"] = cold.remap_min_bytes;
  j["machine_warm_copy_gb_per_s"] = r.warm_copy_bytes_per_s / 1e9;
  j["machine_fresh_write_gb_per_s"] = r.fresh_write_bytes_per_s / 1e9;
  j["machine_populate_gb_per_s"] = r.populate_bytes_per_s / 1e9;
  j["machine_huge_populate_gb_per_s"] = r.huge_populate_bytes_per_s / 1e9;
  j["machine_remap_call_us"] = r.remap_call_seconds * 1e6;
  j["machine_remap_gb_per_s"] = r.remap_byte_seconds > 0 ? 1e-9 / r.remap_byte_seconds : 0.0;
  j["machine_measure_seconds"] = r.measure_seconds;
  j["machine_rates_shared"] = r.shared;
}

void RunTransition::print_machine_lines() const {
  const exec::MachineRates& r = exec::machine_rates();
  std::fprintf(out_,
               "  machine              copy %.2f GB/s warm, first write %.2f GB/s fresh (%.2f populated, %.2f huge "
               "pages); remap %.1f us a call (%s)\n",
               r.warm_copy_bytes_per_s / 1e9, r.fresh_write_bytes_per_s / 1e9, r.populate_bytes_per_s / 1e9,
               r.huge_populate_bytes_per_s / 1e9, r.remap_call_seconds * 1e6,
               r.shared ? "this machine's shared measurement" : "measured by this process");
  const nlohmann::json cold = phases_json(&RankFigures::cold_phases);
  std::fprintf(out_, "  kernel (max/rank)    cold: %.3f s system, %.0f page faults",
               cold["system_seconds"].get<double>(), cold["page_faults"].get<double>());
  if (forward_.size() > 1) {
    const nlohmann::json warm = phases_json(&RankFigures::warm_phases);
    std::fprintf(out_, "; warm: %.3f s system, %.0f page faults", warm["system_seconds"].get<double>(),
                 warm["page_faults"].get<double>());
  }
  std::fprintf(out_, "; keep path %s\n", forward_.front().keep_path.c_str());
  const std::uint64_t mapped = sum_of(&RankFigures::mapped_bytes);
  std::fprintf(out_,
               "  huge pages           %s (transparent huge pages: %s); %.0f %% of the state's blocks in 2 MiB pages\n",
               forward_.front().huge_pages ? "on" : "off (--no-huge-pages or the kernel's mode)",
               exec::thp_mode_name(exec::thp_mode()),
               mapped > 0 ? 100.0 * static_cast<double>(sum_of(&RankFigures::huge_bytes)) / mapped : 0.0);
}

// The lower bound: the most bytes any rank must receive over the probe's rate.
double RunTransition::lower_bound() const {
  return bw_ > 0 ? static_cast<double>(max_of(&RankFigures::received)) / bw_ : 0.0;
}

double RunTransition::keep_copy_seconds() const {
  const double rate = exec::machine_rates().warm_copy_bytes_per_s;
  double most = 0;
  for (const auto& r : all_)
    most = std::max(most, rate > 0 ? static_cast<double>(r.kept - r.kept_zero_copy - r.kept_remapped) / rate : 0.0);
  return most;
}

bool RunTransition::peak_within_bound() const {
  bool within = true;
  for (const auto& r : all_) within &= r.peak <= std::max(r.src, r.dst) + args_.mem_budget;
  return within;
}

nlohmann::json RunTransition::figures_json() const {
  const ColdWarm t = cold_warm(forward_secs_);
  const double lower = lower_bound();
  const exec::TransitionStats& cold = forward_.front();
  const std::uint64_t kept = sum_of(&RankFigures::kept), zero_copy = sum_of(&RankFigures::kept_zero_copy);
  const std::uint64_t remapped = sum_of(&RankFigures::kept_remapped);
  nlohmann::json j;
  j["model"] = model_.name;
  j["from"] = src_layout_->config().str();
  j["to"] = dst_layout_->config().str();
  j["ranks"] = world_.size();
  j["backend"] = world_.backend();
  j["seconds"] = t.cold;
  j["cold_seconds"] = t.cold;
  j["warm_repeats"] = t.warm_repeats;
  j["warm_seconds"] = t.warm_mean;
  j["warm_min_seconds"] = t.warm_min;
  j["forward_seconds"] = forward_secs_;  // every forward switch, the cold one first
  j["back_seconds"] = back_secs_;
  j["bytes_moved"] = sum_of(&RankFigures::sent);
  j["direct_runs"] = args_.direct_runs;
  j["runs_direct_available"] = runs_direct_available_;  // false: the transport packs every scattered message
  j["overlap_links"] = args_.overlap_links;
  j["link_classes"] = cold.link_classes;  // 2: one pipeline per link class (exec::LinkOverlap)
  j["overlapped_rounds"] = sum_of(&RankFigures::overlapped);
  j["rounds_in_flight"] = cold.rounds_in_flight;                       // per link class
  j["bytes_sent_direct"] = sum_of(&RankFigures::sent_direct);          // not packed
  j["bytes_received_direct"] = sum_of(&RankFigures::received_direct);  // not unpacked
  j["committed_ahead_bytes"] = sum_of(&RankFigures::committed_ahead);  // exec::TransitionOptions::commit_ahead
  j["max_rank_bytes_received"] = max_of(&RankFigures::received);
  j["p2p_bandwidth_bytes_per_s"] = bw_;
  j["lower_bound_seconds"] = lower;
  j["plain_exchange_seconds"] = exchange_s_;                // the same bytes, plain messages (best of 5)
  j["plain_exchange_median_seconds"] = exchange_median_s_;  // their median (the model's link)
  // With one core a rank, a rank's own CPU makes its cross-memory reads (the exchange) and its
  // copied keeps one after the other: their sum is the floor there (docs/exec.md).
  j["keep_copy_seconds"] = keep_copy_seconds();
  j["exchange_plus_keep_copy_seconds"] = exchange_s_ + keep_copy_seconds();
  j["ratio"] = lower > 0 ? t.cold / lower : 0.0;
  j["warm_ratio"] = lower > 0 && t.warm_mean > 0 ? t.warm_mean / lower : 0.0;
  j["peak_bytes"] = max_of(&RankFigures::peak);
  j["warm_peak_bytes"] = max_of(&RankFigures::warm_peak);
  j["budget_bytes"] = args_.mem_budget;
  j["max_src_bytes"] = max_of(&RankFigures::src);
  j["max_dst_bytes"] = max_of(&RankFigures::dst);
  j["peak_within_bound"] = peak_within_bound();
  j["pool_fresh_bytes_max"] = max_of(&RankFigures::pool_fresh);
  j["pool_peak_reserved_max"] = max_of(&RankFigures::pool_reserved);
  j["messages_max_per_rank"] = max_of(&RankFigures::messages);
  j["messages_total"] = sum_of(&RankFigures::messages);
  j["waves"] = cold.waves;
  j["wave_order"] = cold.wave_order;
  j["bytes_kept"] = kept;
  j["kept_zero_copy_bytes"] = zero_copy;  // handed over, not copied
  j["kept_zero_copy_share"] = kept > 0 ? static_cast<double>(zero_copy) / kept : 0.0;
  j["kept_remapped_bytes"] = remapped;  // whole pages moved by mremap, not copied
  j["kept_not_copied_share"] = kept > 0 ? static_cast<double>(zero_copy + remapped) / kept : 0.0;
  j["align_pages"] = args_.align_pages;
  j["at_step_boundary"] = args_.at_step_boundary;
  j["saved_bytes_moved"] = sum_of(&RankFigures::saved_sent);  // not sent: zeroed kinds (--at-step-boundary)
  j["saved_bytes_kept"] = sum_of(&RankFigures::saved_kept);   // not copied locally
  j["prefault"] = args_.prefault;
  j["prepare_seconds"] = max_of(&RankFigures::prepare_s);
  j["prefaulted_bytes"] = max_of(&RankFigures::prefaulted);  // max over ranks
  j["granule_bytes"] = cold.granule_bytes;
  j["pagewise_buffers"] = cold.pagewise_buffers;
  j["phases"] = phases_json(&RankFigures::cold_phases);  // cold switch, max over ranks per phase
  if (forward_.size() > 1) j["warm_phases"] = phases_json(&RankFigures::warm_phases);  // last warm switch
  j["path"] = cold.path;
  add_machine_json(j);
  j["verify"] = verify_text_;
  j["placement"] = placed_.str();
  j["largest_buffer_bytes"] = max_of(&RankFigures::largest_buffer);
  add_fanout_json(j);
  if (predicted_) add_prediction_json(j);
  return j;
}

void RunTransition::add_fanout_json(nlohmann::json& j) const {
  const exec::TransitionStats& cold = forward_.front();
  j["fanout_bytes"] = cold.fanout_bytes;
  j["fanout"] = plan::fanout_mode_name(fanout_mode_);  // --fanout
  j["fanout_applied"] = fanout_.applied;
  j["fanout_reason"] = fanout_.reason;
  j["inter_node_bytes"] = sum_of(&RankFigures::inter_with);  // what crossed nodes (--gpus-per-node)
  j["inter_node_bytes_without_fanout"] = sum_of(&RankFigures::inter_without);
  // The stages (1 when not applied), relay and tree groups, and the busiest process's bytes
  // sent to other nodes over all stages (a tree lowers it; plan/fanout.h). 0 groups when off.
  j["fanout_stages"] = fanout_.applied ? fanout_.stages.size() : std::size_t{1};
  j["fanout_relay_groups"] = fanout_.groups;
  j["fanout_tree_candidates"] = fanout_.tree_candidates;
  j["fanout_tree_groups"] = fanout_.tree_groups;
  j["fanout_tree_bytes"] = fanout_.tree_bytes;  // tree hops sent by a receiver, not the source
  const std::uint64_t max_sent_without = max_of(&RankFigures::inter_sent_without);
  j["inter_node_max_send_bytes"] = fanout_mode_ == plan::FanoutMode::kOff ? max_sent_without : fanout_.max_sender_bytes;
  j["inter_node_max_send_bytes_without_fanout"] = max_sent_without;
  // Per forward switch: when the last process finished stage 1 (seconds minus this is the later
  // stages after every process left stage 1; a process that finishes stage 1 early waits in stage 2).
  j["fanout_stage1_seconds"] = fanout_stage1_secs_;
}

void RunTransition::add_prediction_json(nlohmann::json& j) const {
  const SwitchPrediction& p = *predicted_;
  j["predicted_seconds"] = p.result.seconds;  // compare with warm_seconds (warm pool)
  j["predicted_cluster"] = sim::to_json(p.cluster);
  j["predicted_cpu_cores"] = p.cpu_cores;
  j["predicted_run_bytes"] = p.run_bytes;                        // mean run of scattered direct messages
  j["predicted_run_seconds"] = p.run_seconds;                    // measured cost of one such run
  j["predicted_probe_link_gb_per_s"] = p.probe_link / 1e9;       // before calibration on the plain exchange
  j["predicted_probe_link_seconds"] = p.probe_link_seconds;      // the prediction with that rate
  j["predicted_idle_latency_us"] = p.idle_latency * 1e6;         // ping-pong with nothing else running
  j["predicted_busy_handoff_us"] = p.busy_handoff * 1e6;         // a handshake while all copy
  j["predicted_idle_latency_seconds"] = p.idle_latency_seconds;  // the prediction with the idle one
  j["predicted_message_shape"] = {{"bytes", p.message_bytes},    // the probe's messages
                                  {"send_runs", p.send_runs},
                                  {"recv_runs", p.recv_runs}};
  j["predicted_without_runs_seconds"] = p.without_runs_seconds;  // the same, runs free
}

void RunTransition::report() {
  const nlohmann::json j = figures_json();
  print_figures();
  print_plan_lines();
  if (verify_text_ == "ok") std::fprintf(out_, "verify: ok\n");
  std::fflush(out_);
  if (json_file_.is_open()) {
    json_file_ << j.dump(2) << "\n";
    check_written(json_file_, "--json", args_.json);  // a full disk is an error, not a cut-off file
  }
}

// The header, the times and the bytes (the order of the lines is part of the CLI's output).
void RunTransition::print_figures() const {
  const ColdWarm t = cold_warm(forward_secs_);
  std::fprintf(out_, "run-transition %s: %s -> %s on %d ranks (%s), budget %s\n", model_.name.c_str(),
               src_layout_->config().str().c_str(), dst_layout_->config().str().c_str(), world_.size(),
               world_.backend(), format_bytes(static_cast<double>(args_.mem_budget)).c_str());
  if (!runs_direct_available_)
    std::fprintf(out_,
                 "  direct runs          none on the %s transport (no cross-memory reads): scattered messages packed\n",
                 world_.backend());
  if (args_.at_step_boundary)
    std::fprintf(out_, "  at step boundary     grads zeroed in the new layout: %s not sent, %s not copied\n",
                 bytes(sum_of(&RankFigures::saved_sent)).c_str(), bytes(sum_of(&RankFigures::saved_kept)).c_str());
  if (args_.prefault)
    std::fprintf(out_, "  prepare_seconds      %.6f (prefault of %s before the switch; --no-prefault: none)\n",
                 max_of(&RankFigures::prepare_s), bytes(max_of(&RankFigures::prefaulted)).c_str());
  std::fprintf(out_, "  seconds              %.6f (cold)\n", t.cold);
  if (t.warm_repeats > 0)
    std::fprintf(out_, "  warm seconds         %.6f mean, %.6f min over %zu repeats\n", t.warm_mean, t.warm_min,
                 t.warm_repeats);
  std::fprintf(out_, "  bytes_moved          %s (max into one rank %s)\n", bytes(sum_of(&RankFigures::sent)).c_str(),
               bytes(max_of(&RankFigures::received)).c_str());
  std::fprintf(out_, "  bytes kept           %s (not copied: %s in buffers handed over, %s in remapped pages)\n",
               bytes(sum_of(&RankFigures::kept)).c_str(), bytes(sum_of(&RankFigures::kept_zero_copy)).c_str(),
               bytes(sum_of(&RankFigures::kept_remapped)).c_str());
  print_bytes_and_bounds();
}

void RunTransition::print_bytes_and_bounds() const {
  const ColdWarm t = cold_warm(forward_secs_);
  const double lower = lower_bound();
  std::fprintf(out_, "  p2p bandwidth        %s/s per rank (all pairs at once)\n", format_bytes(bw_).c_str());
  std::fprintf(out_, "  lower_bound_seconds  %.6f\n", lower);
  std::fprintf(out_, "  plain exchange       %.6f s (the same bytes and peers as plain messages)\n", exchange_s_);
  if (predicted_)
    std::fprintf(out_, "  predicted_seconds    %.6f (simulator, this machine's rates)\n", predicted_->result.seconds);
  std::fprintf(out_, "  ratio                %.2f cold", lower > 0 ? t.cold / lower : 0.0);
  if (t.warm_mean > 0 && lower > 0) std::fprintf(out_, ", %.2f warm", t.warm_mean / lower);
  std::fprintf(out_, "\n");
  std::fprintf(out_, "  peak_bytes           %s (max source %s, max destination %s, within max(src,dst)+budget: %s)\n",
               bytes(max_of(&RankFigures::peak)).c_str(), bytes(max_of(&RankFigures::src)).c_str(),
               bytes(max_of(&RankFigures::dst)).c_str(), peak_within_bound() ? "yes" : "NO");
}

// Messages, phases, fan-out and placement.
void RunTransition::print_plan_lines() const {
  const exec::TransitionStats& cold = forward_.front();
  std::fprintf(out_, "  messages             %llu max per rank, %llu total; %llu waves, %s order; path %s\n",
               static_cast<unsigned long long>(max_of(&RankFigures::messages)),
               static_cast<unsigned long long>(sum_of(&RankFigures::messages)),
               static_cast<unsigned long long>(cold.waves), cold.wave_order.c_str(), cold.path.c_str());
  const nlohmann::json ph = phases_json(&RankFigures::cold_phases);
  std::fprintf(
      out_,
      "  phases (max over ranks, s)  keep %.4f  pack %.4f  wait %.4f  unpack %.4f  alloc %.4f  agree %.4f  dry %.4f\n",
      ph["keep"].get<double>(), ph["pack"].get<double>(), ph["wait"].get<double>(), ph["unpack"].get<double>(),
      ph["alloc"].get<double>(), ph["agree"].get<double>(), ph["dry"].get<double>());
  print_machine_lines();
  std::fprintf(out_, "  inter-node bytes     %s (%s without fan-out); fan-out %s\n",
               bytes(sum_of(&RankFigures::inter_with)).c_str(), bytes(sum_of(&RankFigures::inter_without)).c_str(),
               fanout_mode_ == plan::FanoutMode::kOff ? "off" : fanout_.reason.c_str());
  if (fanout_.tree_groups > 0)
    std::fprintf(out_,
                 "  fan-out tree         %llu groups, %zu stages; busiest sender to other nodes %s (%s without)\n",
                 static_cast<unsigned long long>(fanout_.tree_groups), fanout_.stages.size(),
                 bytes(fanout_.max_sender_bytes).c_str(), bytes(fanout_.max_sender_bytes_without).c_str());
  if (!placed_.is_identity())
    std::fprintf(out_, "  placement            %s (%d of %d destination ranks on another process)\n",
                 placed_.str().c_str(), placed_.moved_ranks(dst_layout_->config().world_size()),
                 dst_layout_->config().world_size());
}

}  // namespace dynatrain::tools
