#include "job/notice.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/error.h"
#include "job/mpi_world.h"

namespace dynatrain::job {

namespace {

// Written by the signal handler: lock-free atomics are async-signal-safe.
std::atomic<std::int64_t> g_notice_ns{0};  // CLOCK_MONOTONIC time of the first notice; 0: none
std::atomic<bool> g_taken{false};          // the job is acting on this process's notice
std::atomic<bool> g_refused{false};        // ... and the switch that was to vacate it was refused
static_assert(std::atomic<std::int64_t>::is_always_lock_free);
NoticeSettings g_settings;

std::int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void on_notice(int sig) {
  // mpirun's SIGTERM to the survivors of a lost rank is the failure path, not a notice.
  if (peer_gone_on_this_node()) stop_on_signal(sig);
  std::int64_t none = 0;
  g_notice_ns.compare_exchange_strong(none, monotonic_ns());
}

std::mutex g_outside_mu;
std::string g_outside;  // set_outside_layout's `why`

std::string outside_layout() {
  std::lock_guard<std::mutex> g(g_outside_mu);
  return g_outside;
}

// Ends the job when this process is still in it --notice-s after its notice, or at once when
// it holds no rank (it cannot be vacated).
void watch_deadline() {
  const auto deadline_ns = static_cast<std::int64_t>(g_settings.seconds * 1e9);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::int64_t t = g_notice_ns.load();
    if (t != 0 && !g_taken.load())
      if (const std::string why = outside_layout(); !why.empty())
        abort_job("error",
                  detail::concat("notice (", notice_signal_name(g_settings.signal), ") to this process, which ", why,
                                 ": a process outside the layout cannot be vacated; ", g_settings.deadline_end),
                  3);
    if (t != 0 && monotonic_ns() - t > deadline_ns)
      abort_job(
          "error",
          detail::concat("this process had notice (", notice_signal_name(g_settings.signal), ") ", g_settings.seconds,
                         " s ago and has not handed its state over; ", g_settings.deadline_end),
          3);
  }
}

}  // namespace

const char* notice_signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

bool is_notice_signal(int sig) { return sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGHUP; }

int parse_notice_signal(const std::string& name) {
  const std::string n = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  if (n == "TERM") return SIGTERM;
  if (n == "USR1") return SIGUSR1;
  if (n == "USR2") return SIGUSR2;
  if (n == "HUP") return SIGHUP;
  if (n == "none") return 0;
  DT_INPUT_ERROR("--notice-signal '", name,
                 "' is not a notice signal; valid: TERM, USR1, USR2, HUP (with or "
                 "without SIG), or none");
}

void enable_notices(const NoticeSettings& settings) {
  if (settings.signal == 0 || g_settings.signal != 0) return;
  g_settings = settings;
  struct sigaction sa {};
  sa.sa_handler = on_notice;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(settings.signal, &sa, nullptr);
  std::thread(watch_deadline).detach();
}

bool notices_enabled() { return g_settings.signal != 0; }

void set_outside_layout(const std::string& why) {
  std::lock_guard<std::mutex> g(g_outside_mu);
  g_outside = why;
}

NoticeAgreement agree_on_notices(comm::Transport& world, double slowest_step_s) {
  struct Flag {
    std::int32_t noticed, pid;
    double slowest_step_s;
  };
  // 0: no notice or one being acted on; 1: a notice to act on; 2: one whose vacate was refused.
  const bool noticed = g_notice_ns.load() != 0;
  const std::int32_t state = !noticed ? 0 : !g_taken.load() ? 1 : g_refused.load() ? 2 : 0;
  const Flag mine{state, static_cast<std::int32_t>(getpid()), slowest_step_s};
  const auto all = comm::all_gather_values(world, mine);
  NoticeAgreement agreed;
  for (int r = 0; r < world.size(); ++r) {
    const Flag& f = all[static_cast<std::size_t>(r)];
    if (f.noticed == 1) agreed.noticed.push_back({r, f.pid});
    if (f.noticed == 2) ++agreed.refused;
    agreed.slowest_step_s = std::max(agreed.slowest_step_s, f.slowest_step_s);
  }
  return agreed;
}

int notice_lead_steps(double slowest_step_s, double notice_seconds, std::int64_t steps_left) {
  return slowest_step_s > 0 && 2 * slowest_step_s <= notice_seconds / 2 && steps_left > 1 ? 1 : 0;
}

std::string describe_noticed(const std::vector<NoticedProcess>& noticed) {
  std::string s = noticed.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < noticed.size(); ++i)
    s += detail::concat(i ? ", " : "", noticed[i].rank, " (pid ", noticed[i].pid, ")");
  return s;
}

void notice_taken() { g_taken.store(true); }

void notice_refused() {
  if (g_notice_ns.load() != 0) g_refused.store(true);
}

}  // namespace dynatrain::job
