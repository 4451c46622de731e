// Worlds of the c10d backend: a TCPStore rendezvous from options or from the environment that
// torchrun sets, and the threads-in-one-process bootstrap of the tests.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/c10d/c10d_requests.h"
#include "comm/c10d/process_group_transport.h"
#include "common/error.h"

namespace dynatrain::comm {

namespace {

constexpr const char* kPrefix = "dynatrain";

std::unique_ptr<Transport> world_over(c10::intrusive_ptr<c10d::Store> store, const C10dOptions& options) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(kPrefix, store);
  auto group = gloo_group(prefixed, options.rank, options.size, options);
  return process_group_transport(std::move(group), std::move(store), kPrefix, options);
}

// An integer environment variable in [low, high]; `fallback` when unset.
int env_int(const char* name, int low, int high, int fallback) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || v < low || v > high)
    DT_INPUT_ERROR(name, "=", text, " is not an integer in [", low, ", ", high, "]");
  return static_cast<int>(v);
}

// Every rank publishes its command and reads every other's: all ranks find the same difference.
void check_same_command(c10d::Store& store, const C10dOptions& o) {
  const std::string key = "dynatrain-command/";
  store.set(key + std::to_string(o.rank), std::vector<std::uint8_t>(o.command.begin(), o.command.end()));
  std::vector<std::string> commands;
  for (int r = 0; r < o.size; ++r) {
    const std::vector<std::uint8_t> v = store.get(key + std::to_string(r));
    commands.emplace_back(v.begin(), v.end());
  }
  // Rank 0 hosts the store: it stays until every rank has read (at most the timeout).
  store.add(key + "read", 1);
  const auto t0 = std::chrono::steady_clock::now();
  while (o.rank == 0 && store.add(key + "read", 0) < o.size && std::chrono::steady_clock::now() - t0 < o.timeout)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (int r = 1; r < o.size; ++r)
    if (commands[r] != commands.front())
      DT_INPUT_ERROR("the ", o.size, " ranks of this c10d world run different commands: rank 0 runs `",
                     commands.front(), "`, rank ", r, " runs `", commands[r],
                     "`; start every rank with the same command");
}

// This process's subcommand: argv[1] ("" when there is none).
std::string this_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  std::getline(in, arg, '\0');
  return std::getline(in, arg, '\0') ? arg : "";
}

}  // namespace

std::unique_ptr<Transport> c10d_world(const C10dOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    DT_INPUT_ERROR("c10d world: rank ", options.rank, " of ", options.size, " (want 0 <= rank < size)");
  if (options.master_port < 1 || options.master_port > 65535)
    DT_INPUT_ERROR("c10d world: port ", options.master_port, " (want 1..65535)");
  const int rank = options.rank;
  try {
    c10d::TCPStoreOptions store;
    store.port = static_cast<std::uint16_t>(options.master_port);
    store.isServer = rank == 0;
    store.numWorkers = options.size;
    store.waitWorkers = true;
    store.timeout = options.timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store);
    if (!options.command.empty()) check_same_command(*tcp, options);
    return world_over(std::move(tcp), options);
  } catch (const InputError&) {
    throw;
  } catch (...) {
    c10d_detail::rethrow_as_comm_error(
        rank, ::dynatrain::detail::concat("rendezvous of ", options.size, " ranks at ", options.master_addr, ":",
                                          options.master_port));
  }
}

std::unique_ptr<Transport> c10d_world_from_env() {
  if (!std::getenv("RANK") || !std::getenv("WORLD_SIZE")) return nullptr;
  C10dOptions o;
  o.size = env_int("WORLD_SIZE", 1, 1 << 20, 1);
  o.rank = env_int("RANK", 0, o.size - 1, 0);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) o.master_addr = addr;
  o.master_port = env_int("MASTER_PORT", 1, 65535, 29500);
  const int seconds = env_int("DT_RENDEZVOUS_S", 1, 86400, 300);
  o.timeout = std::chrono::seconds(seconds);
  o.command = this_command();
  try {
    return c10d_world(o);
  } catch (const CommError& e) {  // one line: who waited, for what, and how to wait longer
    throw CommError(::dynatrain::detail::concat(
        "rank ", o.rank, " of ", o.size, ": the rendezvous at ", o.master_addr, ":", o.master_port,
        o.rank == 0 ? " did not see all " : " did not complete with all ", o.size, " ranks (RANK 0..", o.size - 1,
        " with this MASTER_ADDR and MASTER_PORT) within ", seconds, " s (DT_RENDEZVOUS_S); is every rank started? (",
        e.what(), ")"));
  }
}

void run_c10d_ranks(int n, const std::function<void(Transport&)>& body, std::chrono::milliseconds timeout) {
  DT_CHECK(n >= 1, "run_c10d_ranks: ", n, " ranks");
  c10d::TCPStoreOptions server;
  server.port = 0;  // a free port
  server.isServer = true;
  server.waitWorkers = false;
  server.timeout = timeout;
  auto host = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", server);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        c10d::TCPStoreOptions client;
        client.port = host->getPort();
        client.timeout = timeout;
        C10dOptions o;
        o.rank = r;
        o.size = n;
        o.timeout = timeout;
        auto world = world_over(c10::make_intrusive<c10d::TCPStore>("127.0.0.1", client), o);
        body(*world);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace dynatrain::comm
