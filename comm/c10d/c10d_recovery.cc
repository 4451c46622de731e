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

}  // namespace dynatrain::comm
