// The watcher of a world's loss mark (job/loss_watch.h) over an in-process key store: the flag
// rises once the watched world's mark is raised, not for another world's mark, and not again for
// a world watched before; a store that stops answering ends the watch, and the watch ends at once
// when destroyed. The launcher's pipe (job/sibling_loss.h): a reported pid of the watched world on
// this node raises the mark and the flag; a pid the world's places do not name on this node does
// not; the report is read when it comes, not at the next look; lines split across writes are
// read whole. Without a pipe: a process of the world on this node killed is seen in /proc;
// one that exits, or another process under its pid, is not.
#include "job/loss_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "job/lost_peer.h"
#include "job/proc_stat.h"
#include "testing/memory_store.h"

namespace dynatrain::job {
namespace {

using testing::MemoryStore;
using testing::StoreConnection;
using namespace std::chrono_literals;

constexpr auto kPeriod = 5ms;

// Whether `flag` is up within `within`.
bool rises(const std::atomic<bool>& flag, std::chrono::milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (!flag && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return flag;
}

TEST(LossWatch, RisesOnTheWatchedWorldsMarkOnly) {
  auto store = std::make_shared<MemoryStore>();
  std::atomic<bool> flag{false};
  LossWatch watch(std::make_unique<StoreConnection>(store), flag, kPeriod);
  watch.watch(loss_mark_key("train/w1"));
  raise_loss_mark(*store, loss_mark_key("train/w0"));  // another world's
  EXPECT_FALSE(rises(flag, 20 * kPeriod));
  raise_loss_mark(*store, loss_mark_key("train/w1"));
  EXPECT_TRUE(rises(flag, 2s));
  raise_loss_mark(*store, loss_mark_key("train/w1"));  // a second survivor's: idempotent
  EXPECT_EQ(store->add(loss_mark_key("train/w1"), 0), 2);
}

TEST(LossWatch, ANewWorldLowersTheFlagAndTheOldMarkCannotRaiseItAgain) {
  auto store = std::make_shared<MemoryStore>();
  std::atomic<bool> flag{false};
  LossWatch watch(std::make_unique<StoreConnection>(store), flag, kPeriod);
  watch.watch(loss_mark_key("train/w1"));
  raise_loss_mark(*store, loss_mark_key("train/w1"));
  ASSERT_TRUE(rises(flag, 2s));
  watch.watch(loss_mark_key("train/w2"));  // the survivors' world
  EXPECT_FALSE(flag);
  EXPECT_FALSE(rises(flag, 20 * kPeriod));
  raise_loss_mark(*store, loss_mark_key("train/w2"));
  EXPECT_TRUE(rises(flag, 2s));
}

TEST(LossWatch, NothingWatchedNothingRaised) {
  auto store = std::make_shared<MemoryStore>();
  std::atomic<bool> flag{false};
  LossWatch watch(std::make_unique<StoreConnection>(store), flag, kPeriod);
  raise_loss_mark(*store, loss_mark_key("train/w1"));
  EXPECT_FALSE(rises(flag, 20 * kPeriod));
}

// A store whose host is gone: every call throws, as c10d's does.
class GoneStore final : public comm::KeyStore {
 public:
  std::int64_t add(const std::string&, std::int64_t) override { throw CommError("store gone"); }
  void set(const std::string&, const std::string&) override { throw CommError("store gone"); }
  std::string get(const std::string&, std::chrono::milliseconds) override { throw CommError("store gone"); }
  bool has(const std::string&) override {
    ++calls;
    throw CommError("store gone");
  }
  std::atomic<int> calls{0};
};

TEST(LossWatch, AStoreThatStopsAnsweringEndsTheWatchWithoutRaising) {
  auto gone = std::make_unique<GoneStore>();
  GoneStore* seen = gone.get();
  std::atomic<bool> flag{false};
  LossWatch watch(std::move(gone), flag, kPeriod);
  watch.watch(loss_mark_key("train/w1"));
  EXPECT_FALSE(rises(flag, 40 * kPeriod));
  EXPECT_EQ(seen->calls.load(), 1);  // asked once, then the thread ended
}

TEST(LossWatch, EndsAtOnceWhenDestroyed) {
  auto store = std::make_shared<MemoryStore>();
  std::atomic<bool> flag{false};
  const auto t0 = std::chrono::steady_clock::now();
  {
    LossWatch watch(std::make_unique<StoreConnection>(store), flag, std::chrono::hours(1));
    watch.watch(loss_mark_key("train/w1"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

// A pipe as the launcher makes one: the reader's end and the launcher's write end.
struct TestPipe {
  TestPipe() { EXPECT_EQ(pipe(ends), 0); }
  ~TestPipe() {
    close(ends[0]);
    close(ends[1]);
  }
  int ends[2] = {-1, -1};
};

TEST(SiblingLossReader, ReadsWholeLinesAcrossWritesAndNothingWithoutAPipe) {
  TestPipe p;
  SiblingLossReader reader(p.ends[0]);
  EXPECT_TRUE(reader.read_reported().empty());
  ASSERT_EQ(write(p.ends[1], "123\n45", 6), 6);
  EXPECT_EQ(reader.read_reported(), std::vector<long>{123});
  tell_siblings({-1, p.ends[1]}, 6);  // "6\n" ends the line "456"
  EXPECT_EQ(reader.read_reported(), std::vector<long>{456});
  tell_siblings({p.ends[1]}, 7);
  tell_siblings({p.ends[1]}, 8);
  EXPECT_EQ(reader.read_reported(), (std::vector<long>{7, 8}));
  SiblingLossReader none(-1);
  EXPECT_FALSE(none.present());
  EXPECT_TRUE(none.read_reported().empty());
}

// The world "train/w1" of 3 processes: ranks 0 and 1 on this node (pids 4100, 4101), rank 2 on
// another node with pid 4102.
void announce_world(MemoryStore& store) {
  store.set("dynatrain/train/w1/places/place/0", node_name() + " 4100 1");
  store.set("dynatrain/train/w1/places/place/1", node_name() + " 4101 1");
  store.set("dynatrain/train/w1/places/place/2", "elsewhere 4102 1");
}

TEST(LossWatch, TheLaunchersReportOfAWorldsProcessRaisesTheMarkForEveryone) {
  auto store = std::make_shared<MemoryStore>();
  announce_world(*store);
  TestPipe p;
  std::atomic<bool> flag{false};
  LossWatch watch(std::make_unique<StoreConnection>(store), flag, kPeriod,
                  std::make_unique<SiblingLossReader>(p.ends[0]));
  watch.watch(loss_mark_key("train/w1"), place_keys("dynatrain/train/w1/places", 3));
  tell_siblings({p.ends[1]}, 4102);  // the same pid on another node: not this launcher's
  tell_siblings({p.ends[1]}, 999);   // not one of the world's
  EXPECT_FALSE(rises(flag, 20 * kPeriod));
  EXPECT_FALSE(store->has(loss_mark_key("train/w1")));
  tell_siblings({p.ends[1]}, 4101);
  EXPECT_TRUE(rises(flag, 2s));
  EXPECT_TRUE(store->has(loss_mark_key("train/w1")));  // the other survivors stop too
  EXPECT_EQ(watch.raised_first(), 1);
}

TEST(LossWatch, TheLaunchersReportIsReadAtOnceNotAtTheNextLook) {
  auto store = std::make_shared<MemoryStore>();
  announce_world(*store);
  TestPipe p;
  std::atomic<bool> flag{false};
  LossWatch watch(std::make_unique<StoreConnection>(store), flag, std::chrono::hours(1),
                  std::make_unique<SiblingLossReader>(p.ends[0]));
  watch.watch(loss_mark_key("train/w1"), place_keys("dynatrain/train/w1/places", 3));
  tell_siblings({p.ends[1]}, 4100);
  EXPECT_TRUE(rises(flag, 5s));  // not an hour later
}

TEST(LossWatch, AReportAfterTheSurvivorsWorldIsWatchedDoesNotRaiseIt) {
  auto store = std::make_shared<MemoryStore>();
  announce_world(*store);
  store->set("dynatrain/train/w2/places/place/0", node_name() + " 4100 1");  // the survivors' world
  store->set("dynatrain/train/w2/places/place/1", "elsewhere 4102 1");
  TestPipe p;
  std::atomic<bool> flag{false};
  LossWatch watch(std::make_unique<StoreConnection>(store), flag, kPeriod,
                  std::make_unique<SiblingLossReader>(p.ends[0]));
  watch.watch(loss_mark_key("train/w2"), place_keys("dynatrain/train/w2/places", 2));
  tell_siblings({p.ends[1]}, 4101);  // lost in w1, reported late
  EXPECT_FALSE(rises(flag, 20 * kPeriod));
  EXPECT_FALSE(store->has(loss_mark_key("train/w2")));
  EXPECT_EQ(watch.raised_first(), 0);
}

// A child of this test that waits to be ended (SIGUSR1: it exits with status 0), and its place
// as it would announce it.
struct Child {
  Child() {
    int ready[2];
    EXPECT_EQ(pipe(ready), 0);
    pid = fork();
    if (pid == 0) {
      signal(SIGUSR1, [](int) { _exit(0); });
      close(ready[1]);  // ready: a SIGUSR1 from now on is an exit, not a kill
      while (true) pause();
    }
    close(ready[1]);
    char byte;
    EXPECT_EQ(read(ready[0], &byte, 1), 0);
    close(ready[0]);
    ProcStat stat;
    EXPECT_TRUE(read_proc_stat(pid, stat));
    start_ticks = stat.start_ticks;
  }
  ~Child() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  std::string place(unsigned long long start) const {
    return node_name() + " " + std::to_string(pid) + " " + std::to_string(start);
  }
  pid_t pid = -1;
  unsigned long long start_ticks = 0;
};

// The watch of world "train/w1" whose rank 1 is `place`, and this process rank 0; no pipe.
struct WatchedWorld {
  explicit WatchedWorld(const std::string& place) {
    store->set("dynatrain/train/w1/places/place/1", place);
    announce_place(*store, "dynatrain/train/w1/places", 0);
    watch.watch(loss_mark_key("train/w1"), place_keys("dynatrain/train/w1/places", 2));
  }
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  std::atomic<bool> flag{false};
  LossWatch watch{std::make_unique<StoreConnection>(store), flag, kPeriod, std::make_unique<SiblingLossReader>(-1)};
};

TEST(LossWatch, AProcessOfThisNodeKilledIsSeenWithoutTheLauncher) {
  Child child;
  WatchedWorld world(child.place(child.start_ticks));
  EXPECT_FALSE(rises(world.flag, 20 * kPeriod));  // alive
  kill(child.pid, SIGKILL);                       // a zombie until ~Child: its line stays
  EXPECT_TRUE(rises(world.flag, 2s));
  EXPECT_TRUE(world.store->has(loss_mark_key("train/w1")));
  EXPECT_EQ(world.watch.raised_first(), 1);
}

TEST(LossWatch, AProcessThatExitsOrAnotherUnderItsPidIsNotALoss) {
  Child exits;  // a vacate, the job's end
  WatchedWorld world(exits.place(exits.start_ticks));
  Child other;  // killed, but not the process the place names (a pid reused)
  WatchedWorld reused(other.place(other.start_ticks + 1));
  kill(exits.pid, SIGUSR1);
  kill(other.pid, SIGKILL);
  EXPECT_FALSE(rises(world.flag, 20 * kPeriod));
  EXPECT_FALSE(rises(reused.flag, 20 * kPeriod));
  ProcStat stat;  // both were seen ended meanwhile
  EXPECT_TRUE(read_proc_stat(exits.pid, stat) && stat.ended());
  EXPECT_TRUE(read_proc_stat(other.pid, stat) && stat.ended());
}

}  // namespace
}  // namespace dynatrain::job
