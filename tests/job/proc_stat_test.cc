// A process's /proc/PID/stat as the job runtime reads it (job/proc_stat.h): this process, children
// that exited, were killed, are stopped, and a pid no process has.
#include "job/proc_stat.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace dynatrain::job {
namespace {

using Clock = std::chrono::steady_clock;

// A child that waits to be ended.
pid_t idle_child() {
  const pid_t child = fork();
  if (child == 0)
    while (true) pause();
  return child;
}

// Reads `pid`'s line until `done` holds for it (at most 10 s); the last line read.
template <typename Done>
ProcStat stat_when(pid_t pid, Done done) {
  ProcStat stat;
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!(read_proc_stat(pid, stat) && done(stat)) && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return stat;
}

TEST(ProcStat, ThisProcessIsRunningAndNotEnding) {
  ProcStat stat;
  ASSERT_TRUE(read_proc_stat(getpid(), stat));
  EXPECT_EQ(stat.state, 'R');
  EXPECT_EQ(stat.parent, getppid());
  EXPECT_FALSE(stat.ended());
  EXPECT_FALSE(stat.leaving());
  EXPECT_EQ(stat.killed_by(), 0);
}

TEST(ProcStat, AChildThatExitedIsEndedByNoSignal) {
  const pid_t child = fork();
  if (child == 0) _exit(3);
  const ProcStat stat = stat_when(child, [](const ProcStat& s) { return s.ended(); });
  EXPECT_EQ(stat.state, 'Z');
  EXPECT_TRUE(stat.leaving());
  EXPECT_EQ(stat.parent, getpid());
  EXPECT_EQ(stat.killed_by(), 0);
  EXPECT_TRUE(WIFEXITED(stat.exit_code));
  EXPECT_EQ(WEXITSTATUS(stat.exit_code), 3);
  waitpid(child, nullptr, 0);
}

TEST(ProcStat, AKilledChildNamesItsSignal) {
  for (int sig : {SIGKILL, SIGTERM, SIGINT}) {
    const pid_t child = idle_child();
    kill(child, sig);
    const ProcStat stat = stat_when(child, [](const ProcStat& s) { return s.ended(); });
    EXPECT_EQ(stat.killed_by(), sig) << strsignal(sig);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), sig);
  }
}

// The point of killed_by(): a process holding memory is known killed while the kernel is still
// freeing it. Whether a look lands in that window is timing; that it is seen at all is not.
TEST(ProcStat, AKilledChildHoldingMemoryIsSeenKilled) {
  const pid_t child = fork();
  if (child == 0) {
    const std::size_t bytes = std::size_t{256} << 20;
    char* memory = static_cast<char*>(std::malloc(bytes));
    std::memset(memory, 1, bytes);
    while (true) pause();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(child, SIGKILL);
  const ProcStat stat = stat_when(child, [](const ProcStat& s) { return s.killed_by() != 0; });
  EXPECT_EQ(stat.killed_by(), SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(ProcStat, AStoppedChildIsNotEnding) {
  const pid_t child = idle_child();
  kill(child, SIGSTOP);
  const ProcStat stat = stat_when(child, [](const ProcStat& s) { return s.state == 'T'; });
  EXPECT_EQ(stat.state, 'T');
  EXPECT_FALSE(stat.ended());
  EXPECT_FALSE(stat.leaving());
  EXPECT_EQ(stat.killed_by(), 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(ProcStat, AReapedPidIsGone) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  ProcStat stat;
  EXPECT_FALSE(read_proc_stat(child, stat));
  EXPECT_FALSE(read_proc_stat(0, stat));
  EXPECT_FALSE(read_proc_stat(-5, stat));
}

}  // namespace
}  // namespace dynatrain::job
