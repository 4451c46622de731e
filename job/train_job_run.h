// TrainJob: the body of `dynatrain train` (train_command in job/train_job.h), job-internal.
//
//   train_job.cc           run(): set_up(), then per step: boundary() (checkpoint, prepare, switch
//                          commit, requests), train_step(), report_step(); then finish()
//   train_job_setup.cc     flag and schedule checks, output files, resume, the trainer
//   train_job_schedule.cc  the schedule as it changes: requests, the per-step job sync, prepares
//   train_job_report.cc    the leader's output: switch and step lines, CSV rows, JSON, summary
//   train_job_notice.cc    preemption notices: the switch that vacates noticed processes
//
// Invariants: every rank of the current world calls the same collective methods in the same
// order; set-up raises InputError identically on every rank before any communication it could
// leave waiting; only the leader (world rank 0 of the current world) writes the files.
#pragma once

#include <atomic>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "job/job_control.h"
#include "job/loss_watch.h"
#include "job/progress_record.h"
#include "job/memory_copy.h"
#include "job/notice.h"
#include "job/train_job.h"
#include "job/train_leader.h"
#include "job/watchdog.h"
#include "train/trainer.h"

namespace dynatrain::job {

class TrainJob {
 public:
  TrainJob(const TrainArgs& args, comm::Transport& world) : args_(args), world_(world) {}
  int run();  // train_command's result

 private:
  using Schedule = std::vector<std::pair<std::int64_t, vps::ParallelConfig>>;

  // Set-up (train_job_setup.cc): every check before any file or collective. set_up returns
  // false when this process joined for a switch and left the job in that first commit.
  bool set_up();
  void build_options();
  void load_schedule();
  void check_layouts(bool joined);
  std::string load_text() const;
  void open_outputs();
  void print_banner() const;
  std::optional<ckpt::Checkpoint> open_resume();
  void start_trainer(std::unique_ptr<comm::Transport> joined_world, std::string text,
                     const std::optional<ckpt::Checkpoint>& resume);

  // The loop (train_job.cc).
  bool boundary();  // the work between two steps; false: the loop ends here
  void save_if_due();
  bool act_on_notices();                                      // false: every process has notice (train_job_notice.cc)
  void commit_pending_sooner(const NoticeAgreement& agreed);  // a notice during a prepare
  void note_layout_for_notices() const;                       // whether this process holds a rank (job/notice.h)
  bool commit_if_due();                                       // false: this process left the job in the commit
  bool commit();
  train::StepStats train_step();
  int finish();
  // A lost process (job/lost_peer.h, train_job_recover.cc) met in a step or a boundary: the
  // step, or nullopt after a recovery in place (the step is to be done again).
  std::optional<train::StepStats> step_or_recover();
  bool boundary_or_recover();  // boundary(), done again after a recovery
  void announce_if_new_world();
  const std::vector<ProcessPlace>& known_places();
  // `in_boundary`: the loss was met in the boundary before the step (else in the step).
  // Returns whether this process completed the interrupted step's update after the others.
  bool recover_from_loss(const CommError& error, bool in_boundary);
  bool complete_step_others_applied(comm::Transport& survivors);
  void reserve_for_recovery();
  [[noreturn]] void end_store_lost(const std::vector<ProcessPlace>& places, int me, const CommError& error);
  [[noreturn]] void end_after_loss(bool first, const std::string& why);
  struct RecoveryTimes {
    double pause_s, agree_s, world_s;  // max over the survivors
    int stopped = 0;                   // survivors whose step the loss's mark stopped (job/loss_watch.h)
    int completed = 0;                 // survivors that completed the step's update after the others
    double met_unix_s = 0;             // the first survivor met the loss (wall clock)
    double resumed_unix_s = 0;         // the last survivor's state rebuilt (wall clock)
  };
  void report_recovery(const std::string& lost, const train::Trainer::Recovery& r, const RecoveryTimes& t);

  // The schedule (train_job_schedule.cc).
  void maybe_prepare();
  std::vector<int> vacated_ranks(std::int64_t at) const;
  std::string rest_of_schedule() const;
  void adopt_rest_of_schedule(const std::string& text);
  void skip_past_entries();  // next = the first entry after the current step
  void take_request();
  bool outside_needed() const;
  bool save_point(std::int64_t s) const;
  bool copy_point(std::int64_t s) const;
  // --redundancy for the supervisor's memory copy (job/memory_copy.h): 0 on torch.distributed,
  // where --redundancy 2 keeps copies on another node instead (refresh_remote_copies).
  int memory_copy_redundancy() const { return args_.lost_peer ? 0 : args_.redundancy; }
  void refresh_remote_copies();
  bool save_due(std::int64_t s) const;
  bool sync_job();
  void end_job();

  // The leader's output (train_job_report.cc).
  bool after_commit(const train::SwitchStats& sw);
  void take_over_as_leader(const train::SwitchStats& sw);
  void report_switch(const train::SwitchStats& sw) const;
  void report_step(const train::StepStats& st);
  void print_step_line();  // the last step's line, once its boundary's memory copy is made
  void write_csv_row(const train::StepStats& st, const std::string& layout);
  void print_summary();

  const TrainArgs& args_;
  comm::Transport& world_;  // the world the job started on (a joined process: its spawn world)
  train::TrainerOptions o_;

  // What the steps share: the schedule as it changes, where the loop stands, the leader's I/O.
  struct State {
    Schedule schedule;               // entry 0: the layout the run starts in; requests insert entries
    std::size_t next = 1;            // the next schedule entry to prepare / commit
    std::int64_t step = 0;           // the step the loop is at
    std::int64_t first_step = 0;     // 0, or the checkpoint's step with --resume
    std::int64_t joined_at = -1;     // a joined process: the step of its first commit (saved already)
    bool ended = false;              // a boundary done again after a recovery ended the loop
    std::int64_t saved = -1;         // the step whose checkpoint save this process saw complete
    bool resumed_elsewhere = false;  // --resume and --save name different directories
    std::string copy_dir;            // --redundancy: the memory copy's directory (job/memory_copy.h)
    bool resumed_from_copy = false;  // --resume names copy_dir: it holds the first step already
    MemoryCopyStats copy_stats;
    std::string step_line;  // the leader's line of the last step, until print_step_line
    nlohmann::json run;     // the run's identity, saved in every checkpoint (job/train_ckpt.h)
    // Switches that must vacate world ranks (`dynatrain request --vacate`), by step: the
    // request's list ("1,3"), or kVacateAll (`--migrate`), which names the processes of the world
    // as it is when the switch is prepared (a grow before then adds its processes to it).
    std::map<std::int64_t, std::string> vacate_at;
    std::string preparing;                       // layout being prepared, for the progress line
    std::optional<train::SwitchStats> switched;  // the switch committed at this step's boundary
    double slowest_step = 0;                     // seconds; arms the step watchdog once nonzero
    bool outside_waiting = false;                // rank 0: ranks outside the layout wait for a message
    int notice_exit = 0;                         // 128 + signal once every process had notice (job/notice.h)
    // The job's leader (job/train_leader.h): world rank 0 of the current world; the role moves
    // with rank 0 in a commit (take_over_as_leader).
    bool leader = false;
    bool tty = false;       // the leader's stdout is a terminal: step lines get a progress bar
    bool progress = false;  // a supervisor reads progress records (job/progress_record.h)
    LeaderState ls;         // the leader's state beyond the VPS state (leader only)
    std::ofstream csv, json_out;
  } s_;

  // Members are destroyed in reverse order: the watchdog before the trainer it watches, the
  // trainer before the files in s_ (as the steps left them).
  std::unique_ptr<train::Trainer> trainer_;
  struct LostPeerState {                    // with args_.lost_peer
    std::unique_ptr<comm::KeyStore> store;  // the rendezvous store, on a connection of the job's own
    std::string world;                      // keys of the world this process last announced in
    bool boundary_again = false;            // the last recovery: a survivor met the loss in the boundary
    std::vector<ProcessPlace> places;       // that world's, read once every process announced
    bool reserved_once = false;             // --recovery-reserve made its first reserve
    // --redundancy 2 (refresh_remote_copies): the world whose nodes the copies were held over,
    // whether any were held, whether they stopped (every process on one node), their figures.
    std::string copies_world;
    bool copies_held = false, copies_stopped = false;
    std::size_t copy_bytes = 0;
    int refreshes = 0;
    double refresh_s = 0, refresh_max_s = 0;
    std::atomic<bool> interrupt{false};  // the trainer's (TrainerOptions::interrupt), raised by:
    std::unique_ptr<LossWatch> watch;    // the watcher of the world's loss mark (destroyed first)
  } lost_;
  JobControl control_{args_.job};  // the scheduler protocol (--job DIR), on the leader
  Watchdog watchdog_;
  double switch_deadline_ = 0;  // seconds a switch may take before the watchdog ends the job
};

}  // namespace dynatrain::job
