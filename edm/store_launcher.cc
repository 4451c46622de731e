#include "edm/store_launcher.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/port.h"
#include "edm/own_command.h"

extern char** environ;

namespace dynatrain::edm {

namespace {

constexpr const char* kOffer = "dynatrain/grow/offer";  // the key of the grow being prepared ("": none)
constexpr const char* kGo = "go";
constexpr auto kPoll = std::chrono::milliseconds(10);
constexpr auto kVerdictMargin = std::chrono::seconds(60);  // beyond the rendezvous: rank 0 decides by then

// "300 s", "0.3 s": how long DT_RENDEZVOUS_S lets a side wait.
std::string seconds_text(std::chrono::milliseconds t) {
  return t.count() % 1000 == 0 ? std::to_string(t.count() / 1000) + " s" : detail::concat(t.count() / 1000.0, " s");
}

std::string refusal_head(int count) { return "cannot start " + std::to_string(count) + " process(es): "; }

// The offer of a grow: how many join, how many processes the job has.
struct Offer {
  int count = 0, size = 0;
};
std::string serialize(const Offer& o) { return std::to_string(o.count) + " " + std::to_string(o.size); }
Offer parse_offer(const std::string& text) {
  Offer o;
  std::istringstream in(text);
  if (!(in >> o.count >> o.size) || o.count < 1 || o.size < 1) throw CommError("malformed grow offer '" + text + "'");
  return o;
}

// This environment with `set` replacing (or adding) its variables.
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [n, v] : set) replaced |= n == name;
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [n, v] : set) out.push_back(n + "=" + v);
  return out;
}

// Starts `count` processes of this program with its arguments, joining the store at `address`
// (a world of their own among them). Throws LaunchRefused naming why nothing was started.
std::vector<pid_t> start_joiners(int count, const std::string& address, const std::string& executable) {
  const std::string exe = executable.empty() ? self_executable() : executable;
  const int port = probe_port(0);  // on 127.0.0.1: the joiners' own world meets there
  if (exe.empty() || port <= 0) throw LaunchRefused(refusal_head(count) + "no executable or no free port on this host");
  std::vector<std::string> args = own_arguments();
  args.insert(args.begin(), exe);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    const std::string rank = std::to_string(i), size = std::to_string(count);
    std::vector<std::string> env = environment_with({{"RANK", rank},
                                                     {"LOCAL_RANK", rank},
                                                     {"WORLD_SIZE", size},
                                                     {"LOCAL_WORLD_SIZE", size},
                                                     {"MASTER_ADDR", "127.0.0.1"},
                                                     {"MASTER_PORT", std::to_string(port)},
                                                     {"DYNATRAIN_JOIN", address}});
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (rc != 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      throw LaunchRefused(refusal_head(count) + "starting '" + exe + "' failed: " + std::strerror(rc));
    }
    pids.push_back(pid);
  }
  return pids;
}

class StoreLauncher final : public Launcher {
 public:
  explicit StoreLauncher(std::shared_ptr<const StoreMembership> m) : m_(std::move(m)) {}

  // The processes this one started end with the job: the job's end waits for them a while, so
  // a launcher that waits for its own children sees the whole job's output.
  ~StoreLauncher() override {
    const auto until = Clock::now() + std::chrono::seconds(30);
    for (pid_t pid : started_)
      while (waitpid(pid, nullptr, WNOHANG) == 0 && Clock::now() < until) std::this_thread::sleep_for(kPoll);
  }

  std::string cannot_start(int count, int /*alive*/) const override {
    if (m_) return {};
    return refusal_head(count) +
           "this job's torch.distributed store cannot be reached by processes outside it (not a TCPStore); start it "
           "with `dynatrain launch` or torchrun, or with `dynatrain train --np N` (MPI)";
  }

  std::unique_ptr<comm::Transport> grow(comm::Transport& world, int count) override {
    if (!m_) throw LaunchRefused(cannot_start(count, 0));
    auto store = m_->job_store(world);
    std::string key;
    if (world.rank() == 0) key = "dynatrain/grow" + std::to_string(store->add("dynatrain/grow/serial", 1));
    comm::broadcast_string(world, key);
    if (world.rank() == 0) store->set(key + "/verdict", decide(*store, key, count, world.size(), m_->address(world)));
    const std::string verdict = store->get(key + "/verdict", m_->rendezvous + kVerdictMargin);
    if (verdict != kGo) throw LaunchRefused(refusal_head(count) + verdict);
    try {
      return m_->grown_world(world, key + "/world", world.size() + count);
    } catch (const CommError& e) {  // a joiner gone before its group: no process connects, so all refuse alike
      throw LaunchRefused(refusal_head(count) + "the grown world's group could not be built: " + e.what());
    }
  }

  std::unique_ptr<comm::Transport> join() override;

  std::string cannot_leave() const override { return {}; }
  std::string cannot_vacate(int process) const override {
    if (process != 0) return {};
    return "world rank 0 hosts the torch.distributed store (MASTER_ADDR:MASTER_PORT) that every group of the "
           "job is built over, so it cannot leave while the job goes on";
  }
  // Nothing waits for a process that left (no MPI_Finalize); ending at once keeps the groups'
  // destructors from touching peers that already went.
  void leave() override {
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }

 private:
  std::string decide(comm::KeyStore& store, const std::string& key, int count, int size, const std::string& address);
  std::string first_ended(const std::vector<pid_t>& pids, int arrived, int count);
  std::unique_ptr<comm::Transport> join_through(comm::KeyStore& store, const std::string& address);

  std::shared_ptr<const StoreMembership> m_;
  std::vector<pid_t> started_;  // by this process, over the job's life
};

// On world rank 0: publishes the offer, starts the joiners (unless DT_JOIN_EXTERNAL=1) and
// returns the verdict: kGo once each of them took a slot and runs the job's command, else why not.
std::string StoreLauncher::decide(comm::KeyStore& store, const std::string& key, int count, int size,
                                  const std::string& address) {
  store.set(key + "/offer", serialize(Offer{count, size}));
  store.set(key + "/command", m_->command);
  store.set(kOffer, key);
  const char* external = std::getenv("DT_JOIN_EXTERNAL");
  std::vector<pid_t> pids;
  std::string verdict;
  try {
    if (external == nullptr || std::string(external) != "1") pids = start_joiners(count, address, m_->executable);
  } catch (const LaunchRefused& e) {
    verdict = e.what();
  }
  started_.insert(started_.end(), pids.begin(), pids.end());
  const auto deadline = Clock::now() + m_->rendezvous;
  while (verdict.empty()) {
    const auto arrived = static_cast<int>(store.add(key + "/arrived", 0));
    if (arrived >= count) {
      verdict = kGo;
      for (int slot = 0; slot < count && verdict == kGo; ++slot)
        if (const std::string c = store.get(key + "/command/" + std::to_string(slot), m_->rendezvous); c != m_->command)
          verdict = detail::concat("joining process ", slot, " runs `", c, "`, the job runs `", m_->command,
                                   "`; start the joining processes with the job's command");
    } else if (std::string ended = first_ended(pids, arrived, count); !ended.empty()) {
      verdict = ended;
    } else if (Clock::now() > deadline) {
      verdict = detail::concat(arrived, " of the ", count, " joining process(es) came to the job's store at ", address,
                               " within ", seconds_text(m_->rendezvous), " (DT_RENDEZVOUS_S)",
                               pids.empty() ? "; with DT_JOIN_EXTERNAL=1 start them with `dynatrain launch --join " +
                                                  address + " --np " + std::to_string(count) + " -- CMD`"
                                            : "");
    } else {
      std::this_thread::sleep_for(kPoll);
    }
  }
  store.set(kOffer, "");  // withdrawn: a process that comes later waits for the next grow
  return verdict;
}

// Why the grow cannot go on when a process this one started has ended, else "".
std::string StoreLauncher::first_ended(const std::vector<pid_t>& pids, int arrived, int count) {
  for (pid_t pid : pids) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != pid) continue;
    const std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                : "ended with status " + std::to_string(WEXITSTATUS(status));
    return detail::concat("process ", pid, ", started to join the job, ", how, " (", arrived, " of ", count,
                          " joined)");
  }
  return {};
}

std::unique_ptr<comm::Transport> StoreLauncher::join() {
  const char* where = std::getenv("DYNATRAIN_JOIN");
  if (where == nullptr || *where == '\0') return nullptr;
  const std::string address = where;
  if (!m_) throw JoinRefused("DYNATRAIN_JOIN=" + address + ": this process's own world cannot reach a store");
  std::unique_ptr<comm::KeyStore> store;
  try {
    store = m_->connect(address);
  } catch (const CommError& e) {
    throw JoinRefused(detail::concat("no job's store answered at ", address, " (DYNATRAIN_JOIN) within ",
                                     seconds_text(m_->rendezvous), " (DT_RENDEZVOUS_S): ", e.what()));
  }
  try {
    return join_through(*store, address);
  } catch (const CommError& e) {  // the store's host (the job's world rank 0) gone, or the grown world's group
    throw JoinRefused(detail::concat("joining the job at ", address, " failed: ", e.what()));
  }
}

// The joining side of the grow offered at `store` (JoinRefused naming why it cannot join).
std::unique_ptr<comm::Transport> StoreLauncher::join_through(comm::KeyStore& store, const std::string& address) {
  std::string key;
  const auto deadline = Clock::now() + m_->rendezvous;
  while ((key = store.has(kOffer) ? store.get(kOffer, kPoll) : "").empty()) {
    if (Clock::now() > deadline)
      throw JoinRefused(detail::concat("the job's store at ", address, " (DYNATRAIN_JOIN) offered no grow within ",
                                       seconds_text(m_->rendezvous),
                                       " (DT_RENDEZVOUS_S): the job must prepare a switch to more "
                                       "processes (a --schedule entry or a request) with DT_JOIN_EXTERNAL=1"));
    std::this_thread::sleep_for(kPoll);
  }
  const Offer offer = parse_offer(store.get(key + "/offer", m_->rendezvous));
  const int slot = static_cast<int>(store.add(key + "/arrived", 1)) - 1;
  if (slot >= offer.count)
    throw JoinRefused(detail::concat("the job at ", address, " grows by ", offer.count,
                                     " process(es), which had all joined; this one is one too many"));
  store.set(key + "/command/" + std::to_string(slot), m_->command);
  const std::string verdict = store.get(key + "/verdict", m_->rendezvous + kVerdictMargin);
  if (verdict != kGo) throw JoinRefused("the job at " + address + " called its grow off: " + verdict);
  return m_->joined_world(address, key + "/world", offer.size + slot, offer.size + offer.count);
}

}  // namespace

std::unique_ptr<Launcher> make_store_launcher(std::shared_ptr<const StoreMembership> membership) {
  return std::make_unique<StoreLauncher>(std::move(membership));
}

}  // namespace dynatrain::edm
