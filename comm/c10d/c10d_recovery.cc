// The survivors' side of a lost process on a c10d world (c10d_recovery.h).
#include "comm/c10d/c10d_recovery.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "comm/c10d/c10d_requests.h"
#include "comm/c10d/process_group_transport.h"
#include "common/error.h"

namespace dynatrain::comm {

namespace {

using c10d_detail::rethrow_as_comm_error;

// The sockets open in this process: fd -> inode (from /proc/self/fd, "socket:[INODE]").
std::map<int, unsigned long> open_sockets() {
  std::map<int, unsigned long> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), link_ec).string();
    if (link_ec || target.rfind("socket:[", 0) != 0) continue;
    try {
      out[std::stoi(entry.path().filename().string())] = std::stoul(target.substr(8));
    } catch (const std::exception&) {  // not a number: not one of ours
    }
  }
  return out;
}

// Inodes of the connections of every Gloo group built here since the last abandon.
std::mutex g_mutex;
std::set<unsigned long> g_group_sockets;

c10::intrusive_ptr<c10d::TCPStore> connect_like(const C10dParts& parts, std::chrono::milliseconds timeout) {
  auto* tcp = dynamic_cast<c10d::TCPStore*>(parts.store.get());
  DT_CHECK(tcp != nullptr, "this c10d world's store is not a TCPStore: its survivors cannot agree through it");
  c10d::TCPStoreOptions o;
  o.port = tcp->getPort();
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(tcp->getHost(), o);
  } catch (...) {
    rethrow_as_comm_error(
        parts.rank, ::dynatrain::detail::concat("connecting to the store at ", tcp->getHost(), ":", tcp->getPort()));
  }
}

class C10dKeyStore final : public KeyStore {
 public:
  C10dKeyStore(c10::intrusive_ptr<c10d::TCPStore> store, int rank) : store_(std::move(store)), rank_(rank) {}
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    try {
      return store_->add(key, delta);
    } catch (...) {
      rethrow_as_comm_error(rank_, "store add " + key);
    }
  }
  void set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
    } catch (...) {
      rethrow_as_comm_error(rank_, "store set " + key);
    }
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
      const std::vector<std::uint8_t> v = store_->get(key);
      return {v.begin(), v.end()};
    } catch (...) {
      rethrow_as_comm_error(rank_, "store get " + key);
    }
  }
  bool has(const std::string& key) override {
    try {
      return store_->check({key});
    } catch (...) {
      rethrow_as_comm_error(rank_, "store check " + key);
    }
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> store_;
  int rank_;
};

}  // namespace

GroupSockets::GroupSockets() {
  for (const auto& [fd, inode] : open_sockets()) before_.insert(inode);
}

GroupSockets::~GroupSockets() {
  const auto now = open_sockets();
  std::lock_guard lock(g_mutex);
  for (const auto& [fd, inode] : now)
    if (before_.count(inode) == 0) g_group_sockets.insert(inode);
}

bool is_c10d_world(const Transport& world) { return c10d_parts(world).store != nullptr; }

int abandon_c10d_groups() {
  std::lock_guard lock(g_mutex);
  int shut = 0;
  for (const auto& [fd, inode] : open_sockets()) {
    if (g_group_sockets.count(inode) == 0) continue;
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    // A listening socket has no peer: it stays (the survivors' groups accept on it).
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0 && shutdown(fd, SHUT_RDWR) == 0) ++shut;
  }
  g_group_sockets.clear();
  return shut;
}

std::unique_ptr<KeyStore> c10d_key_store(const Transport& world, std::chrono::milliseconds timeout) {
  const C10dParts parts = c10d_parts(world);
  DT_CHECK(parts.store != nullptr, "c10d_key_store on a ", world.backend(), " world");
  return std::make_unique<C10dKeyStore>(connect_like(parts, timeout), parts.rank);
}

std::unique_ptr<Transport> c10d_members_world(const Transport& world, const std::string& key,
                                              const std::vector<int>& members) {
  const C10dParts parts = c10d_parts(world);
  DT_CHECK(parts.store != nullptr, "c10d_members_world on a ", world.backend(), " world");
  DT_CHECK(std::is_sorted(members.begin(), members.end()), "members not ascending");
  const auto at = std::find(members.begin(), members.end(), parts.rank);
  DT_CHECK(at != members.end(), "rank ", parts.rank, " builds a world of members it is not one of");
  const int me = static_cast<int>(at - members.begin()), size = static_cast<int>(members.size());
  auto connection = connect_like(parts, parts.options.timeout);
  std::string prefix = "dynatrain/" + key;
  try {
    auto group = gloo_group(c10::make_intrusive<c10d::PrefixStore>(prefix, connection), me, size, parts.options);
    return process_group_transport(std::move(group), std::move(connection), std::move(prefix), parts.options);
  } catch (...) {
    rethrow_as_comm_error(parts.rank,
                          ::dynatrain::detail::concat("building the world of ", size, " members (", key, ")"));
  }
}

}  // namespace dynatrain::comm
