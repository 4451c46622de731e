// The store launcher's grow protocol (edm/store_launcher.h) with the job's processes and the
// joiners as threads, the store a map in memory and the grown world an in-process one: who may
// join, what each side is told when a grow cannot happen. (Real processes over a real c10d
// store: tests/reliability/c10d_grow_test.sh.)
#include "edm/store_launcher.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "comm/inproc/inproc_transport.h"
#include "testing/memory_store.h"

namespace dynatrain::edm {
namespace {

using namespace std::chrono_literals;

using testing::MemoryStore;
using testing::StoreConnection;

// One job of `job_size` threads growing by `count` with `joiners` joining threads, each joiner
// running `joiner_command`. Records what every thread got: its rank of the grown world, or its
// error's line.
struct Grow {
  int job_size = 2, count = 2, joiners = 2;
  std::string joiner_command = "train --steps 8";
  std::chrono::milliseconds rendezvous = 5s;
  bool build_fails = false;  // the grown world's group cannot be built (a joiner gone before it)

  std::vector<std::string> job_got, joiner_got;

  void run() {
    setenv("DT_JOIN_EXTERNAL", "1", 1);  // the joiners are threads here: the job starts none
    setenv("DYNATRAIN_JOIN", "127.0.0.1:1", 1);
    auto store = std::make_shared<MemoryStore>();
    comm::InprocWorld job(job_size), grown(job_size + count);
    auto membership = [&](const std::string& command) {
      auto m = std::make_shared<StoreMembership>();
      m->job_store = [store](const comm::Transport&) { return std::make_unique<StoreConnection>(store); };
      m->connect = [store](const std::string&) { return std::make_unique<StoreConnection>(store); };
      m->address = [](const comm::Transport&) { return std::string("127.0.0.1:1"); };
      m->grown_world = [&](const comm::Transport& w, const std::string&, int) {
        if (build_fails) throw CommError("connect timed out");
        return grown.transport(w.rank()).split(0, w.rank());
      };
      m->joined_world = [&](const std::string&, const std::string&, int rank, int) {
        if (build_fails) throw CommError("connect timed out");
        return grown.transport(rank).split(0, rank);
      };
      m->command = command;
      m->rendezvous = rendezvous;
      return m;
    };
    job_got.assign(job_size, "");
    joiner_got.assign(joiners, "");
    std::vector<std::thread> threads;
    for (int r = 0; r < job_size; ++r)
      threads.emplace_back([&, r] {
        auto launcher = make_store_launcher(membership("train --steps 8"));
        job_got[r] = outcome([&] { return launcher->grow(job.transport(r), count); });
      });
    for (int j = 0; j < joiners; ++j)
      threads.emplace_back([&, j] {
        auto launcher = make_store_launcher(membership(joiner_command));
        joiner_got[j] = outcome([&] { return launcher->join(); });
      });
    for (auto& t : threads) t.join();
    unsetenv("DT_JOIN_EXTERNAL");
    unsetenv("DYNATRAIN_JOIN");
  }

 private:
  // "rank R of N" after a broadcast over the world, or the error's text.
  static std::string outcome(const std::function<std::unique_ptr<comm::Transport>()>& body) {
    try {
      auto world = body();
      std::string from_root = world->rank() == 0 ? "hello" : "";
      comm::broadcast_string(*world, from_root);
      return "rank " + std::to_string(world->rank()) + " of " + std::to_string(world->size()) + " " + from_root;
    } catch (const std::exception& e) {
      return e.what();
    }
  }
};

TEST(StoreLauncher, JoinersTakeTheRanksAfterTheJobsProcesses) {
  Grow g;
  g.run();
  EXPECT_EQ(g.job_got[0], "rank 0 of 4 hello");
  EXPECT_EQ(g.job_got[1], "rank 1 of 4 hello");
  std::sort(g.joiner_got.begin(), g.joiner_got.end());
  EXPECT_EQ(g.joiner_got[0], "rank 2 of 4 hello");
  EXPECT_EQ(g.joiner_got[1], "rank 3 of 4 hello");
}

TEST(StoreLauncher, AJoinerWithAnotherCommandCallsTheGrowOffOnEveryProcess) {
  Grow g;
  g.joiner_command = "train --steps 9";
  g.run();
  for (const std::string& got : g.job_got)
    EXPECT_EQ(got.rfind("cannot start 2 process(es): joining process 0 runs `train --steps 9`, the job runs `train "
                        "--steps 8`",
                        0),
              0u)
        << got;
  for (const std::string& got : g.joiner_got)
    EXPECT_EQ(got.rfind("the job at 127.0.0.1:1 called its grow off: joining process 0 runs", 0), 0u) << got;
}

TEST(StoreLauncher, TooFewJoinersWithinTheRendezvousRefuseTheGrowByName) {
  Grow g;
  g.joiners = 1;
  g.rendezvous = 300ms;
  g.run();
  for (const std::string& got : g.job_got)
    EXPECT_EQ(got.rfind("cannot start 2 process(es): 1 of the 2 joining process(es) came to the job's store at "
                        "127.0.0.1:1 within 0.3 s (DT_RENDEZVOUS_S); with DT_JOIN_EXTERNAL=1 start them with "
                        "`dynatrain launch --join 127.0.0.1:1 --np 2 -- CMD`",
                        0),
              0u)
        << got;
  EXPECT_EQ(g.joiner_got[0].rfind("the job at 127.0.0.1:1 called its grow off: 1 of the 2", 0), 0u) << g.joiner_got[0];
}

TEST(StoreLauncher, AGrownWorldThatCannotBeBuiltIsRefusedOnEveryProcess) {
  Grow g;
  g.build_fails = true;
  g.run();
  for (const std::string& got : g.job_got)
    EXPECT_EQ(got, "cannot start 2 process(es): the grown world's group could not be built: connect timed out");
  for (const std::string& got : g.joiner_got)
    EXPECT_EQ(got, "joining the job at 127.0.0.1:1 failed: connect timed out");
}

// What a lone joiner of the store `store` is told (DYNATRAIN_JOIN set while it asks).
std::string join_refusal(std::shared_ptr<MemoryStore> store, std::chrono::milliseconds rendezvous = 5s) {
  setenv("DYNATRAIN_JOIN", "127.0.0.1:1", 1);
  auto m = std::make_shared<StoreMembership>();
  m->connect = [store](const std::string&) { return std::make_unique<StoreConnection>(store); };
  m->rendezvous = rendezvous;
  std::string got;
  try {
    make_store_launcher(m)->join();
  } catch (const JoinRefused& e) {
    got = e.what();
  }
  unsetenv("DYNATRAIN_JOIN");
  return got;
}

// A joiner that comes while the offer stands but after every slot was taken (a joiner that
// comes after the offer was withdrawn waits for the next grow instead).
TEST(StoreLauncher, AJoinerPastTheCountIsOneTooMany) {
  auto store = std::make_shared<MemoryStore>();
  store->set("dynatrain/grow/offer", "dynatrain/grow1");
  store->set("dynatrain/grow1/offer", "2 2");
  store->add("dynatrain/grow1/arrived", 2);
  EXPECT_EQ(join_refusal(store),
            "the job at 127.0.0.1:1 grows by 2 process(es), which had all joined; this one is one too many");
}

TEST(StoreLauncher, AJoinerWithoutAnOfferSaysWhatTheJobMustDo) {
  const std::string got = join_refusal(std::make_shared<MemoryStore>(), 200ms);
  EXPECT_EQ(got.rfind("the job's store at 127.0.0.1:1 (DYNATRAIN_JOIN) offered no grow within 0.2 s", 0), 0u) << got;
}

TEST(StoreLauncher, NoJoinSettingMeansAProcessOfTheJob) {
  unsetenv("DYNATRAIN_JOIN");
  EXPECT_EQ(make_store_launcher(std::make_shared<StoreMembership>())->join(), nullptr);
}

}  // namespace
}  // namespace dynatrain::edm
