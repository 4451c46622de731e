// Rank 0's switch decision (edm/switch_decision.h): every kind reads back the same; another
// version is refused as input naming it; a malformed field is refused naming the field; the
// decision from what the launcher can do (the "cannot vacate" check among them).
#include "edm/switch_decision.h"
#include "edm/store_launcher.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "testing/error_message.h"

namespace dynatrain::edm {
namespace {

template <typename E>
std::string refusal(const std::string& wire) {
  return testing::error_message<E>([&] { parse_switch_decision(wire); });
}

TEST(SwitchDecision, EveryKindRoundTrips) {
  for (const auto kind : {SwitchDecision::Kind::kKeep, SwitchDecision::Kind::kShrink, SwitchDecision::Kind::kRefuse}) {
    const SwitchDecision d{
        kind, "cannot vacate processes: \"quoted\"\nline", kind != SwitchDecision::Kind::kKeep, {2, 0, 1}};
    const SwitchDecision back = parse_switch_decision(serialize(d));
    EXPECT_EQ(back.kind, d.kind);
    EXPECT_EQ(back.why, d.why);
    EXPECT_EQ(back.may_leave, d.may_leave);
    EXPECT_EQ(back.placement, d.placement);
    EXPECT_EQ(back.refused(), kind == SwitchDecision::Kind::kRefuse);
  }
  EXPECT_EQ(serialize(SwitchDecision{}), R"({"kind":"keep","may_leave":false,"placement":[],"version":1,"why":""})");
}

TEST(SwitchDecision, AnotherVersionIsRefusedByName) {
  const std::string why =
      refusal<InputError>(R"({"version":2,"kind":"keep","why":"","may_leave":false,"placement":[]})");
  EXPECT_NE(why.find("switch decision version 2 is not supported; this process reads version 1 (every process of a "
                     "job must run the same dynatrain)"),
            std::string::npos)
      << why;
}

TEST(SwitchDecision, MalformedFieldsAreNamed) {
  const auto named = [](const std::string& wire, const std::string& want) {
    const std::string why = refusal<InvariantError>(wire);
    EXPECT_NE(why.find(want), std::string::npos) << wire << " -> " << why;
  };
  named("S", "'S' is not a JSON object");  // the string the decision used to be
  named(R"({"kind":"keep"})", "\"version\" must be an integer");
  named(R"({"version":1,"kind":"grow","why":"","may_leave":false,"placement":[]})",
        "\"kind\" must be \"keep\", \"shrink\" or \"refuse\"");
  named(R"({"version":1,"kind":"keep","may_leave":false,"placement":[]})", "\"why\" must be a string");
  named(R"({"version":1,"kind":"keep","why":"","may_leave":1,"placement":[]})", "\"may_leave\" must be true or false");
  named(R"({"version":1,"kind":"keep","why":"","may_leave":true,"placement":[0,-1]})",
        "\"placement\" must be an array of process ranks");
}

// A launcher that answers as told and never starts anything.
struct FakeLauncher final : Launcher {
  std::string start_refusal, leave_refusal;
  std::string cannot_start(int, int) const override { return start_refusal; }
  std::unique_ptr<comm::Transport> grow(comm::Transport&, int) override { return nullptr; }
  std::unique_ptr<comm::Transport> join() override { return nullptr; }
  std::string cannot_leave() const override { return leave_refusal; }
  void leave() override {}
};

TEST(SwitchDecision, DecidedFromWhatTheLauncherCanDo) {
  FakeLauncher free;
  EXPECT_EQ(decide_switch(2, 2, {}, &free, "mpi").kind, SwitchDecision::Kind::kKeep);  // a grow
  EXPECT_EQ(decide_switch(-1, 4, {}, &free, "mpi").kind, SwitchDecision::Kind::kShrink);
  EXPECT_EQ(decide_switch(0, 4, {1}, &free, "mpi").kind, SwitchDecision::Kind::kShrink);  // a vacate
  EXPECT_TRUE(decide_switch(0, 4, {1}, &free, "mpi").may_leave);

  FakeLauncher stuck;
  stuck.start_refusal = "cannot start 2 processes: no free slot";
  stuck.leave_refusal = "OMPI_MCA_orte_allowed_exit_without_sync is not 1";
  const SwitchDecision grow = decide_switch(2, 2, {}, &stuck, "mpi");
  EXPECT_TRUE(grow.refused());
  EXPECT_EQ(grow.why, "cannot start 2 processes: no free slot");
  const SwitchDecision shrink = decide_switch(-1, 4, {}, &stuck, "mpi");  // nobody may leave: they stay, idle
  EXPECT_EQ(shrink.kind, SwitchDecision::Kind::kKeep);
  EXPECT_EQ(shrink.why, stuck.leave_refusal);
  EXPECT_FALSE(shrink.may_leave);
  const SwitchDecision vacate = decide_switch(0, 4, {1}, &stuck, "mpi");  // the "cannot vacate" check
  EXPECT_TRUE(vacate.refused());
  EXPECT_EQ(vacate.why, "cannot vacate processes: OMPI_MCA_orte_allowed_exit_without_sync is not 1");

  EXPECT_EQ(decide_switch(1, 2, {}, nullptr, "inproc").why,
            "cannot start processes: the inproc transport has no launcher");
  EXPECT_EQ(decide_switch(0, 2, {1}, nullptr, "inproc").why, "cannot vacate processes: the transport has no launcher");
  EXPECT_EQ(decide_switch(-1, 2, {}, nullptr, "inproc").kind, SwitchDecision::Kind::kKeep);  // no launcher: all stay

  const SwitchDecision lend = decide_switch(-2, 4, {}, &free, "mpi", /*keep=*/true);  // they stay, idle, lent
  EXPECT_EQ(lend.kind, SwitchDecision::Kind::kKeep);
  EXPECT_EQ(lend.why, "lent (kept for a later switch)");
  EXPECT_FALSE(lend.may_leave);
  EXPECT_EQ(decide_switch(0, 4, {1}, &free, "mpi", true).why, "a switch that keeps its processes vacates none");
}

// A world from the environment (c10d): processes leave, and world rank 0, the store's host, is
// never vacated; without a store that processes outside the job reach, none start.
TEST(SwitchDecision, StoreLauncherShrinksButNeverVacatesTheStoreHost) {
  const std::unique_ptr<Launcher> store = make_store_launcher();
  EXPECT_EQ(decide_switch(-2, 4, {}, store.get(), "c10d").kind, SwitchDecision::Kind::kShrink);
  EXPECT_TRUE(decide_switch(-2, 4, {}, store.get(), "c10d").may_leave);
  EXPECT_EQ(decide_switch(0, 4, {1, 3}, store.get(), "c10d").kind, SwitchDecision::Kind::kShrink);
  const SwitchDecision host = decide_switch(0, 4, {3, 0}, store.get(), "c10d");
  EXPECT_TRUE(host.refused());
  EXPECT_NE(host.why.find("cannot vacate processes: world rank 0 hosts the torch.distributed store"), std::string::npos)
      << host.why;
  const SwitchDecision grow = decide_switch(2, 2, {}, store.get(), "c10d");
  EXPECT_TRUE(grow.refused());
  EXPECT_EQ(grow.why.rfind("cannot start 2 process(es): this job's torch.distributed store cannot be reached", 0), 0u)
      << grow.why;
  const std::unique_ptr<Launcher> reachable = make_store_launcher(std::make_shared<StoreMembership>());
  EXPECT_FALSE(decide_switch(2, 2, {}, reachable.get(), "c10d").refused());
}

}  // namespace
}  // namespace dynatrain::edm
