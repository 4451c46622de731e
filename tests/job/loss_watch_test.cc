// The watcher of a world's loss mark (job/loss_watch.h) over an in-process key store: the flag
// rises once the watched world's mark is raised, not for another world's mark, and not again for
// a world watched before; a store that stops answering ends the watch, and the watch ends at once
// when destroyed.
#include "job/loss_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/error.h"
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

}  // namespace
}  // namespace dynatrain::job
