// RunTransition: the body of `dynatrain run-transition` (run_transition_command in
// tools/run_transition_cli.h), tools-internal.
//
//   run_transition_cli.cc     run(): check the arguments, plan, fill the state, prefault, switch
//                             K rounds (verifying the first and last), gather the figures, measure
//                             the plain exchange and the prediction
//   run_transition_report.cc  rank 0: the --json record and the printed lines
//
// Every rank's figures travel in one all-gather of RankFigures (and one of the per-round
// seconds) after the rounds; the other collectives are the switch's own, the probes', and the
// agreements that decide what every rank does next (files, the deadline, a failed verify).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/pool_allocator.h"
#include "job/watchdog.h"
#include "plan/fanout.h"
#include "plan/planner.h"
#include "tools/predict_switch.h"
#include "tools/run_transition_cli.h"

namespace dynatrain::tools {

// Where one switch's time went on one rank (exec::TransitionStats' phase seconds).
// With what the switch cost the kernel: system seconds and page faults (process-wide).
struct PhaseSeconds {
  double keep = 0, pack = 0, wait = 0, unpack = 0, alloc = 0, agree = 0, dry = 0;
  double system = 0, faults = 0;
};

// One rank's figures of the run: what rank 0 reports as a sum or maximum over ranks.
struct RankFigures {
  // The plan: bytes arriving from / sent to other nodes (--gpus-per-node) without fan-out, and
  // arriving over every stage with it (the direct plan's when fan-out is not applied).
  std::uint64_t inter_without = 0, inter_sent_without = 0, inter_with = 0;
  std::uint64_t largest_buffer = 0;  // bytes of the largest buffer before or after
  double prepare_s = 0;              // the prefault's seconds (0 with --no-prefault)
  std::uint64_t prefaulted = 0;      // bytes it touched
  // The cold (first) switch.
  std::uint64_t received = 0, sent = 0, messages = 0, sent_direct = 0, received_direct = 0;
  std::uint64_t committed_ahead = 0;  // receive memory committed before the exchange
  std::uint64_t kept = 0, kept_zero_copy = 0, kept_remapped = 0;
  std::uint64_t saved_sent = 0, saved_kept = 0;  // zeroed kinds not sent / not copied
  std::uint64_t peak = 0, overlapped = 0, src = 0, dst = 0;
  std::uint64_t warm_peak = 0;  // the largest peak of the warm switches (0: none)
  std::uint64_t pool_fresh = 0, pool_reserved = 0;
  // After the last switch: the pool's mapped blocks and, of those, bytes in huge pages (smaps).
  std::uint64_t mapped_bytes = 0, huge_bytes = 0;
  PhaseSeconds cold_phases, warm_phases;  // the cold switch's, the last one's
};

// One round on one rank: its forward switch, the switch back before it (rounds 2..K) and,
// with fan-out applied, when this rank finished stage 1.
struct RoundSeconds {
  double forward = 0, back = 0, stage1 = 0;
};

// The engine options that shape the run's pool (PoolAllocator: the budget and keep path).
exec::TransitionOptions pool_options(const RunTransitionArgs& args);

class RunTransition {
 public:
  RunTransition(const RunTransitionArgs& args, comm::Transport& world, std::FILE* out);
  int run();  // run_transition_command's result

 private:
  // Set-up (identical arguments on every rank, so every rank throws the same InputError).
  void check_arguments();
  void plan_switch();
  void agree_deadline();
  void prepare_state();
  std::size_t probe_bytes();  // collective
  // The rounds.
  void run_rounds();
  bool verify(const char* when);
  // The figures.
  void gather_figures();
  void measure_plain_exchange();
  // Rank 0's report (run_transition_report.cc).
  nlohmann::json figures_json() const;
  void add_fanout_json(nlohmann::json& j) const;
  void add_prediction_json(nlohmann::json& j) const;
  void add_machine_json(nlohmann::json& j) const;
  void print_machine_lines() const;
  void print_figures() const;
  void print_bytes_and_bounds() const;
  void print_plan_lines() const;
  void report();

  // The gathered figures, over ranks.
  template <typename T>
  T max_of(T RankFigures::*field) const;
  std::uint64_t sum_of(std::uint64_t RankFigures::*field) const;
  nlohmann::json phases_json(PhaseSeconds RankFigures::*which) const;  // max over ranks per phase
  // The copied keeps' seconds of the busiest rank at this machine's measured warm copy rate
  // (kept bytes not handed over and not remapped); 0 when the rate was not measured.
  double keep_copy_seconds() const;
  double lower_bound() const;      // the most bytes a rank receives over the probe's rate
  bool peak_within_bound() const;  // every rank's peak <= max(src, dst) + --mem-budget

  const RunTransitionArgs& args_;
  comm::Transport& world_;
  std::FILE* out_;
  const int me_;
  const bool root_;

  // Set-up.
  plan::FanoutMode fanout_mode_ = plan::FanoutMode::kOff;
  plan::FanoutCosts fanout_rates_;
  vps::ModelSpec model_;
  vps::LayoutOptions lo_;
  std::optional<vps::Layout> src_layout_, dst_layout_;
  int need_ = 0;             // processes the switch runs on (0..need-1; the others wait)
  std::ofstream json_file_;  // opened in set-up, so a bad path fails before any work
  plan::Topology topo_;
  plan::Placement placed_;
  std::optional<plan::Planner> fwd_planner_, back_planner_;
  plan::RankPlan fwd_, back_;
  vps::RankLayout src_rl_, dst_rl_;
  std::uint32_t zeroed_ = 0;  // kinds zeroed, not moved (--at-step-boundary)
  plan::FanoutPlan fanout_;
  double switch_deadline_ = 0;
  job::Watchdog watchdog_;
  std::atomic<std::uint64_t> progress_{0};  // bytes the switches moved (the watchdog's sign of life)
  exec::PoolAllocator pool_{args_.huge_pages ? exec::HugePages::kAuto : exec::HugePages::kOff, pool_options(args_)};
  std::vector<std::byte*> a_, b_;  // the source state, the destination state
  double bw_ = 0;                  // the point-to-point probe's bytes/s
  exec::TransitionOptions opt_;

  // The run.
  RankFigures mine_;
  std::vector<exec::TransitionStats> forward_;
  std::vector<RoundSeconds> rounds_;  // this rank's
  std::string verify_text_ = "skipped";
  int exit_code_ = 0;

  // Gathered (every rank has them; rank 0 reports them).
  std::vector<RankFigures> all_;
  std::vector<double> forward_secs_, back_secs_, fanout_stage1_secs_;  // max over ranks per round
  bool runs_direct_available_ = true;
  double exchange_s_ = 0, exchange_median_s_ = 0;
  std::optional<SwitchPrediction> predicted_;
};

}  // namespace dynatrain::tools
