// The survivors' agreement of a lost process (job/lost_peer.h) over an in-process key store, one
// thread per survivor: who is lost at once (gone on this node), who after the settle time (on
// another node), nobody when everyone arrives, a survivor that comes after the decision, and the
// places processes announce.
#include "job/lost_peer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "testing/memory_store.h"

namespace dynatrain::job {
namespace {

using Clock = std::chrono::steady_clock;

using testing::MemoryStore;

// A pid that no process has any more: a child that ended and was reaped.
long ended_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

// Every rank in `ranks` agrees on its own thread; each one's result.
std::map<int, std::vector<int>> agree(MemoryStore& store, const std::vector<ProcessPlace>& places,
                                      const std::vector<int>& ranks, const AgreeSettings& settings) {
  std::map<int, std::vector<int>> out;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      auto members = agree_survivors(store, "k", places, r, settings);
      std::lock_guard lock(mu);
      out[r] = members;
    });
  for (auto& t : threads) t.join();
  return out;
}

class AgreeSurvivors : public ::testing::Test {
 protected:
  void SetUp() override { setenv("DYNATRAIN_NODE", "n1", 1); }
  void TearDown() override { unsetenv("DYNATRAIN_NODE"); }
  std::vector<ProcessPlace> four_here() const {
    return std::vector<ProcessPlace>(4, ProcessPlace{"n1", static_cast<long>(getpid())});
  }
};

TEST_F(AgreeSurvivors, AProcessGoneOnThisNodeIsLostWithoutWaiting) {
  MemoryStore store;
  auto places = four_here();
  places[2].pid = ended_pid();
  const auto t0 = Clock::now();
  const auto got = agree(store, places, {0, 1, 3}, {60, 30});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);  // not the 30 s settle
  for (int r : {0, 1, 3}) EXPECT_EQ(got.at(r), (std::vector<int>{0, 1, 3})) << "rank " << r;
  EXPECT_EQ(lost_text(places, got.at(0)), "rank 2 (pid " + std::to_string(places[2].pid) + ") on node n1");
}

TEST(LostText, NamesTheLostRanksByNodeAndAWholeNode) {
  const std::vector<ProcessPlace> places = {{"a", 10}, {"a", 11}, {"b", 12}, {"b", 13}, {"c", 14}};
  EXPECT_EQ(lost_text(places, {0, 2, 3, 4}), "rank 1 (pid 11) on node a");
  EXPECT_EQ(lost_text(places, {0, 1, 4}), "rank 2 (pid 12), rank 3 (pid 13) on node b (the whole node)");
  EXPECT_EQ(lost_text(places, {1, 2}),
            "rank 0 (pid 10) on node a and rank 3 (pid 13) on node b and rank 4 (pid 14) "
            "on node c (the whole node)");
  EXPECT_EQ(lost_text({{"(unknown)", 0}, {"a", 1}}, {1}), "rank 0 (pid 0) on node (unknown)");
}

TEST_F(AgreeSurvivors, AProcessOnAnotherNodeIsLostAfterTheSettleTime) {
  MemoryStore store;
  auto places = four_here();
  places[3] = {"n2", 1};  // runs, as far as this node can tell: only the settle time decides
  const auto t0 = Clock::now();
  const auto got = agree(store, places, {0, 1, 2}, {60, 0.3});
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.3);
  EXPECT_EQ(got.at(1), (std::vector<int>{0, 1, 2}));
}

TEST_F(AgreeSurvivors, AProcessReportedGoneByASurvivorOfItsNodeIsLostWithoutWaiting) {
  MemoryStore store;
  auto places = four_here();
  places[2] = {"n2", 1};     // runs, as far as n1 can tell
  store.add("k/gone/2", 1);  // what a survivor on n2 reports on arrival, having seen it end there
  const auto t0 = Clock::now();
  const auto got = agree(store, places, {0, 1, 3}, {60, 30});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  EXPECT_EQ(got.at(0), (std::vector<int>{0, 1, 3}));
}

TEST_F(AgreeSurvivors, EveryoneArrivingMeansNobodyLost) {
  MemoryStore store;
  const auto got = agree(store, four_here(), {0, 1, 2, 3}, {60, 30});
  EXPECT_EQ(got.at(3), (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(AgreeSurvivors, ASurvivorAfterTheDecisionIsToldItWasLeftOut) {
  MemoryStore store;
  auto places = four_here();
  places[3] = {"n2", 1};
  agree(store, places, {0, 1, 2}, {60, 0.05});
  try {
    agree_survivors(store, "k", places, 3, {60, 0.05});
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("world rank 3 reached the survivors' agreement after it was decided without "
                                         "it (0,1,2)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(AgreeSurvivors, PlacesNotAnnouncedAreUnknownWithoutWaiting) {
  MemoryStore store;
  announce_place(store, "w1", 0);
  announce_place(store, "w1", 2);
  const auto places = announced_places(store, "w1", 3);
  EXPECT_EQ(places[0].node, "n1");
  EXPECT_EQ(places[0].pid, static_cast<long>(getpid()));
  EXPECT_EQ(places[1].node, "(unknown)");
  EXPECT_EQ(places[2].pid, static_cast<long>(getpid()));
}

TEST(ProcessPlaces, ParseFromTheRightSoANodeNameMayHoldSpaces) {
  const auto place = parse_place("rack 4 node 7 4242 1234567");
  ASSERT_TRUE(place.has_value());
  EXPECT_EQ(place->node, "rack 4 node 7");
  EXPECT_EQ(place->pid, 4242);
  EXPECT_EQ(place->start_ticks, 1234567u);
  for (const char* bad : {"n1 4242", "n1 x 12", "n1 12 x", " 12 34", "12 34", "", "n1 12 34 "})
    EXPECT_FALSE(parse_place(bad).has_value()) << "'" << bad << "'";
}

TEST_F(AgreeSurvivors, NoDecisionWithinTheDeadlineIsACommError) {
  MemoryStore store;
  EXPECT_THROW(agree_survivors(store, "k", four_here(), 1, {0.2, 30}), CommError);  // rank 0 never comes
}

}  // namespace
}  // namespace dynatrain::job
