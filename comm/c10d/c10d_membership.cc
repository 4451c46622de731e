// Keys and worlds over a c10d job's rendezvous store (c10d_membership.h).
#include "comm/c10d/c10d_membership.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "comm/c10d/c10d_requests.h"
#include "comm/c10d/process_group_transport.h"
#include "common/error.h"

namespace dynatrain::comm {

namespace {

using c10d_detail::rethrow_as_comm_error;

c10d::TCPStore& tcp_store_of(const C10dParts& parts) {
  auto* tcp = dynamic_cast<c10d::TCPStore*>(parts.store.get());
  DT_CHECK(tcp != nullptr, "this c10d world's store is not a TCPStore: no process outside it can reach it");
  return *tcp;
}

c10::intrusive_ptr<c10d::TCPStore> connect(const std::string& host, int port, std::chrono::milliseconds timeout,
                                           int rank) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (...) {
    rethrow_as_comm_error(rank, ::dynatrain::detail::concat("connecting to the store at ", host, ":", port));
  }
}

c10::intrusive_ptr<c10d::TCPStore> connect_like(const C10dParts& parts, std::chrono::milliseconds timeout) {
  const c10d::TCPStore& tcp = tcp_store_of(parts);
  return connect(tcp.getHost(), tcp.getPort(), timeout, parts.rank);
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

// Rank `rank` of a world of `size` built under `key` over `connection` (a connection of its own
// to the job's store), `who` naming this process in errors.
std::unique_ptr<Transport> world_over(c10::intrusive_ptr<c10d::TCPStore> connection, const std::string& key, int rank,
                                      int size, const C10dOptions& options, int who) {
  std::string prefix = "dynatrain/" + key;
  try {
    auto group = gloo_group(c10::make_intrusive<c10d::PrefixStore>(prefix, connection), rank, size, options);
    return process_group_transport(std::move(group), std::move(connection), std::move(prefix), options);
  } catch (...) {
    rethrow_as_comm_error(who, ::dynatrain::detail::concat("building the world of ", size, " processes (", key, ")"));
  }
}

// "HOST:PORT" -> (HOST, PORT); InputError naming what is valid.
std::pair<std::string, int> host_and_port(const std::string& address) {
  const auto colon = address.rfind(':');
  const std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long p = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
  if (host.empty() || port.empty() || *end != '\0' || errno != 0 || p < 1 || p > 65535)
    DT_INPUT_ERROR("store address '", address, "'; valid: HOST:PORT of the running job's store, PORT in 1..65535");
  return {host, static_cast<int>(p)};
}

}  // namespace

bool is_c10d_world(const Transport& world) { return c10d_parts(world).store != nullptr; }

std::string c10d_world_name(const Transport& world) {
  const C10dParts parts = c10d_parts(world);
  DT_CHECK(parts.store != nullptr, "c10d_world_name on a ", world.backend(), " world");
  return parts.prefix;
}

std::string c10d_store_address(const Transport& world) {
  const c10d::TCPStore& tcp = tcp_store_of(c10d_parts(world));
  return ::dynatrain::detail::concat(tcp.getHost(), ":", tcp.getPort());
}

std::unique_ptr<KeyStore> c10d_key_store(const Transport& world, std::chrono::milliseconds timeout) {
  const C10dParts parts = c10d_parts(world);
  DT_CHECK(parts.store != nullptr, "c10d_key_store on a ", world.backend(), " world");
  return std::make_unique<C10dKeyStore>(connect_like(parts, timeout), parts.rank);
}

std::unique_ptr<KeyStore> c10d_connect_store(const std::string& address, std::chrono::milliseconds timeout) {
  const auto [host, port] = host_and_port(address);
  return std::make_unique<C10dKeyStore>(connect(host, port, timeout, -1), -1);
}

std::unique_ptr<Transport> c10d_members_world(const Transport& world, const std::string& key,
                                              const std::vector<int>& members) {
  const C10dParts parts = c10d_parts(world);
  DT_CHECK(parts.store != nullptr, "c10d_members_world on a ", world.backend(), " world");
  DT_CHECK(std::is_sorted(members.begin(), members.end()), "members not ascending");
  const auto at = std::find(members.begin(), members.end(), parts.rank);
  DT_CHECK(at != members.end(), "rank ", parts.rank, " builds a world of members it is not one of");
  const int me = static_cast<int>(at - members.begin()), size = static_cast<int>(members.size());
  return world_over(connect_like(parts, parts.options.timeout), key, me, size, parts.options, parts.rank);
}

std::unique_ptr<Transport> c10d_grown_world(const Transport& world, const std::string& key, int size) {
  const C10dParts parts = c10d_parts(world);
  DT_CHECK(parts.store != nullptr, "c10d_grown_world on a ", world.backend(), " world");
  DT_CHECK(size > world.size(), "a grown world of ", size, " processes from ", world.size());
  return world_over(connect_like(parts, parts.options.timeout), key, world.rank(), size, parts.options, parts.rank);
}

std::unique_ptr<Transport> c10d_joined_world(const std::string& address, const std::string& key, int rank, int size,
                                             std::chrono::milliseconds timeout) {
  const auto [host, port] = host_and_port(address);
  C10dOptions options;  // the job's address picks the device (loopback: 127.0.0.1), as for the job's processes
  options.rank = rank;
  options.size = size;
  options.master_addr = host;
  options.master_port = port;
  options.timeout = timeout;
  return world_over(connect(host, port, timeout, rank), key, rank, size, options, rank);
}

}  // namespace dynatrain::comm
