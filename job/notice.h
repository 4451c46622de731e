// Preemption notices: a signal delivered to ONE worker process (SIGTERM by default, what a
// cloud's spot revocation or a scheduler's preemption sends; `train --notice-signal`) means
// "this process will be gone in --notice-s seconds". The job does not stop: at the next step
// boundary every rank learns which processes have notice (one all-gather), the job vacates their
// ranks into a layout for the processes that stay (an ordinary planned switch, prepared behind
// the next step and committed after it, or prepared and committed at once when the deadline
// leaves no room for that step: notice_lead_steps), and each noticed process exits 0 after
// handing its state over. Several notices at once are one switch; a notice during a switch's prepare is
// acted on once that switch has committed. If every process has notice, the job saves a
// checkpoint (with --save) and ends with 128 + the signal.
//
// A signal that follows the loss of a peer on this node (mpirun sends SIGTERM to every survivor
// when a rank dies) is not a notice: it takes the job's failure path (job/mpi_world.h).
//
// Deadline: a noticed process still in the job --notice-s seconds after its notice ends the
// whole job with one line (exit 3), so that a supervisor (--max-restarts) restarts it from the
// newest checkpoint before the machine disappears under it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace dynatrain::job {

inline constexpr const char* kCliDeadlineEnd =
    "the job ends so that it restarts from its newest checkpoint (--max-restarts)";
// The same for a job started from the environment (torch.distributed), which no supervisor restarts.
inline constexpr const char* kEnvWorldDeadlineEnd =
    "the job ends; start it again from its newest checkpoint (--resume DIR of its --save)";

struct NoticeSettings {
  int signal = 0;         // the notice signal (e.g. SIGTERM); 0: notices off, the signal stops the job
  double seconds = 30.0;  // time from the notice until the process is gone
  // The end of the deadline's line: what ending the job is for, in the words of the caller's
  // interface (the CLI's flag, or Python's arguments).
  std::string deadline_end = kCliDeadlineEnd;
};

// Parses a --notice-signal value: TERM, SIGTERM, USR1, SIGUSR1, USR2, SIGUSR2, HUP, SIGHUP, or
// "none" (returns 0); anything else is an InputError naming the valid names.
int parse_notice_signal(const std::string& name);

// Installs the notice handler for settings.signal (replacing the failure path's handler for it)
// and starts the deadline thread. Call once, after run_on_mpi_world has set up the failure path.
void enable_notices(const NoticeSettings& settings);

// Whether enable_notices ran with a signal.
bool notices_enabled();

struct NoticedProcess {
  int rank = 0;  // world rank
  int pid = 0;
};

struct NoticeAgreement {
  std::vector<NoticedProcess> noticed;  // by increasing world rank
  double slowest_step_s = 0;            // the largest of every rank's slowest step
  // Processes whose notice was acted on by a vacating switch that was refused (notice_refused):
  // they stay until their deadline, and count among those that will go when the others get
  // notice too (then every process has notice).
  int refused = 0;
};

// Collective over `world`: the processes with a notice not yet acted on, and the slowest step
// any rank has timed (`slowest_step_s` is this rank's), the same on every rank (one all-gather
// of a flag, a pid and a time).
NoticeAgreement agree_on_notices(comm::Transport& world, double slowest_step_s);

// Steps from the boundary that acts on a notice to the vacating commit. 1: the switch is
// prepared in the background during the next step, so the pause training sees holds only the
// commit (and what is left of the prepare); chosen when two of the slowest steps fit in half the
// notice's seconds and a step is left to run. 0 otherwise: prepared and committed at once, the
// deadline before hiding the prepare (also before any step is timed: slowest_step_s == 0).
int notice_lead_steps(double slowest_step_s, double notice_seconds, std::int64_t steps_left);

// "rank 3 (pid 4242)", "ranks 1 (pid 11), 2 (pid 12)".
std::string describe_noticed(const std::vector<NoticedProcess>& noticed);

// Why this process cannot be vacated now: "" while it holds a rank of the current layout (or is
// being started for one), else e.g. "holds no rank of tp=1,pp=1,dp=2,zero=1 (2 of the 4
// processes hold ranks)"; set by the training loop at its start and after every commit. A
// process outside the layout takes part in no boundary's agreement on notices, so a notice to
// it is refused at once (within 50 ms) with one line naming `why`, ending the job (exit 3)
// as the deadline would (NoticeSettings::deadline_end), not at the deadline.
void set_outside_layout(const std::string& why);

// This process's notice is being acted on (its ranks are in a vacating switch): later
// agree_on_notices calls leave it out. Its deadline still runs.
void notice_taken();
// The vacating switch that took this process's notice was refused (e.g. on torch.distributed,
// world rank 0 hosts the store and cannot leave): it is not vacated again, its deadline still
// runs, and later agreements count it in NoticeAgreement::refused. No effect without a notice.
void notice_refused();

// The signal's name for messages ("SIGTERM").
const char* notice_signal_name(int sig);

// Whether `sig` is one of the signals --notice-signal accepts (TERM, USR1, USR2, HUP).
bool is_notice_signal(int sig);

// The leader's stdout line when every process has notice (followed by " (SIGTERM)"): the job
// ends on purpose, and a supervisor (job/supervisor.h) does not restart it.
constexpr const char* kEveryProcessNoticed = "notice: every process has notice; the job ends";

}  // namespace dynatrain::job
