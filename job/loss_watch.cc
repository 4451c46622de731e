#include "job/loss_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "job/lost_peer.h"

namespace dynatrain::job {

std::string loss_mark_key(const std::string& world_keys) { return "dynatrain/" + world_keys + "/loss_met"; }

void raise_loss_mark(comm::KeyStore& store, const std::string& key) { store.add(key, 1); }

LossWatch::LossWatch(std::unique_ptr<comm::KeyStore> store, std::atomic<bool>& flag, std::chrono::milliseconds period,
                     std::unique_ptr<SiblingLossReader> siblings)
    : store_(std::move(store)), period_(period), flag_(flag), siblings_(std::move(siblings)) {
  DT_CHECK(store_ != nullptr, "LossWatch without a store");
  wake_ = eventfd(0, EFD_CLOEXEC);
  if (wake_ < 0) throw CommError(detail::concat("LossWatch: no eventfd: ", std::strerror(errno)));
  thread_ = std::thread([this] { run(); });
}

LossWatch::~LossWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  const std::uint64_t one = 1;
  const ssize_t n = write(wake_, &one, sizeof one);
  (void)n;
  thread_.join();
  close(wake_);
}

void LossWatch::wait_for_news() {
  pollfd fds[2] = {{wake_, POLLIN, 0}, {siblings_ && siblings_->present() ? siblings_->fd() : -1, POLLIN, 0}};
  const auto ms = std::min<std::chrono::milliseconds::rep>(period_.count(), INT_MAX);
  poll(fds, 2, static_cast<int>(ms));  // EINTR: a look early
}

void LossWatch::watch(const std::string& key, std::vector<std::string> place_keys) {
  std::lock_guard<std::mutex> lock(mu_);
  key_ = key;
  place_keys_ = std::move(place_keys);
  ++generation_;
  flag_ = false;
}

void LossWatch::read_new_places() {
  const std::string here = node_name();
  std::vector<std::string> unread;
  for (const std::string& key : peers_.unread) {
    if (!store_->has(key)) {  // not announced (yet): looked for again at the next look
      unread.push_back(key);
      continue;
    }
    const std::optional<ProcessPlace> p = parse_place(store_->get(key, std::chrono::seconds(10)));  // set: at once
    if (p && p->node == here && p->pid != static_cast<long>(getpid())) peers_.here.push_back(*p);
  }
  peers_.unread = std::move(unread);
}

bool LossWatch::peer_lost(const std::vector<long>& reported) const {
  for (const ProcessPlace& peer : peers_.here)
    if (std::find(reported.begin(), reported.end(), peer.pid) != reported.end() || seen_killed_here(peer)) return true;
  return false;
}

void LossWatch::run() {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  while (true) {
    wait_for_news();
    lock.lock();
    if (stop_) return;
    const std::vector<long> reported = siblings_ ? siblings_->read_reported() : std::vector<long>{};
    const bool idle = key_.empty() || flag_;
    const std::string key = key_;
    if (peers_.generation != generation_) peers_ = Peers{generation_, place_keys_, {}};
    lock.unlock();
    if (idle) continue;
    bool raised = false;
    try {
      read_new_places();
      if (peer_lost(reported)) {  // first to know: tell every survivor
        raise_loss_mark(*store_, key);
        ++raised_first_;
        raised = true;
      }
      raised = raised || store_->has(key);
    } catch (const CommError&) {  // the store's host is gone: the survivors meet it themselves
      return;
    }
    lock.lock();
    if (raised && key == key_) flag_ = true;  // not a world watched before
    lock.unlock();
  }
}

}  // namespace dynatrain::job
