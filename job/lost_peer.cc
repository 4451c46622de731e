#include "job/lost_peer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "common/error.h"
#include "job/job_files.h"
#include "job/job_request.h"
#include "job/mpi_world.h"
#include "job/proc_stat.h"

namespace dynatrain::job {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(5);

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::max(0.0, seconds) * 1000));
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Whether process `pid` of this node will never arrive: gone, or its exit begun (a process
// holding GBs takes ~0.1 s to end after SIGKILL: job/proc_stat.h).
bool leaving(long pid) {
  ProcStat stat;
  return !read_proc_stat(pid, stat) || stat.leaving();
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

// On world rank 0: the members once every process arrived or is known gone (see agree_survivors).
std::vector<int> decide(comm::KeyStore& store, const std::string& prefix, const std::vector<ProcessPlace>& places,
                        const AgreeSettings& settings) {
  const int size = static_cast<int>(places.size());
  const std::string here = node_name();
  const auto start = Clock::now();
  auto last_change = start;
  std::vector<int> arrived;
  while (true) {
    std::vector<int> now;
    for (int r = 0; r < size; ++r)
      if (store.add(prefix + "/alive/" + std::to_string(r), 0) > 0) now.push_back(r);
    if (now != arrived) arrived = now, last_change = Clock::now();
    int waiting = 0, waiting_here = 0;
    for (int r = 0; r < size; ++r) {
      if (std::find(arrived.begin(), arrived.end(), r) != arrived.end()) continue;
      const bool local = places[static_cast<std::size_t>(r)].node == here;
      if ((local && leaving(places[static_cast<std::size_t>(r)].pid)) ||
          store.add(prefix + "/gone/" + std::to_string(r), 0) > 0)
        continue;
      ++waiting;
      waiting_here += local ? 1 : 0;
    }
    if (waiting == 0 || (waiting_here == 0 && seconds_since(last_change) > settings.settle_s) ||
        seconds_since(start) > settings.deadline_s)
      return arrived;
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

std::string node_name() {
  if (const char* node = std::getenv("DYNATRAIN_NODE"); node != nullptr && *node != '\0') return node;
  return host_name();
}

static std::string place_key(const std::string& prefix, int rank) { return prefix + "/place/" + std::to_string(rank); }

void announce_place(comm::KeyStore& store, const std::string& prefix, int rank) {
  ProcStat self;
  const unsigned long long start = read_proc_stat(getpid(), self) ? self.start_ticks : 0;
  store.set(place_key(prefix, rank), node_name() + " " + std::to_string(getpid()) + " " + std::to_string(start));
}

std::vector<std::string> place_keys(const std::string& prefix, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(place_key(prefix, r));
  return keys;
}

std::optional<ProcessPlace> parse_place(const std::string& text) {
  // From the right: the start time, the pid, then the node (which may hold spaces).
  const auto last = text.rfind(' ');
  if (last == std::string::npos || last == 0) return std::nullopt;
  const auto middle = text.rfind(' ', last - 1);
  if (middle == std::string::npos || middle == 0) return std::nullopt;  // no node
  const auto number = [&](std::size_t from, std::size_t to, long long& out) {
    if (from == to || text.find_first_not_of("0123456789", from) < to) return false;
    out = std::strtoll(text.c_str() + from, nullptr, 10);
    return true;
  };
  long long pid = 0, start = 0;
  if (!number(middle + 1, last, pid) || !number(last + 1, text.size(), start)) return std::nullopt;
  return ProcessPlace{text.substr(0, middle), static_cast<long>(pid), static_cast<unsigned long long>(start)};
}

bool seen_killed_here(const ProcessPlace& place) {
  ProcStat stat;
  return place.start_ticks != 0 && place.node == node_name() && read_proc_stat(place.pid, stat) &&
         stat.start_ticks == place.start_ticks && stat.killed_by() != 0;
}
std::vector<ProcessPlace> announced_places(comm::KeyStore& store, const std::string& prefix, int size) {
  std::vector<ProcessPlace> out(static_cast<std::size_t>(size), ProcessPlace{"(unknown)", 0});
  for (int r = 0; r < size; ++r) {
    const std::string key = place_key(prefix, r);
    if (!store.has(key)) continue;
    const std::string text = store.get(key, std::chrono::seconds(10));  // set: answered at once
    const std::optional<ProcessPlace> place = parse_place(text);
    DT_CHECK(place.has_value(), "place of rank ", r, " is '", text, "'");
    out[static_cast<std::size_t>(r)] = *place;
  }
  return out;
}

std::vector<int> agree_survivors(comm::KeyStore& store, const std::string& prefix,
                                 const std::vector<ProcessPlace>& places, int rank, const AgreeSettings& settings) {
  store.add(prefix + "/alive/" + std::to_string(rank), 1);
  const std::string here = node_name();
  for (std::size_t r = 0; r < places.size(); ++r)  // seen ended here: the decision need not wait for it
    if (places[r].node == here && leaving(places[r].pid)) store.add(prefix + "/gone/" + std::to_string(r), 1);
  if (rank == 0) store.set(prefix + "/members", join_ranks(decide(store, prefix, places, settings)));
  std::vector<int> members = parse_rank_list(store.get(prefix + "/members", millis(settings.deadline_s)));
  if (std::find(members.begin(), members.end(), rank) == members.end())
    throw LeftOutOfAgreement(::dynatrain::detail::concat("world rank ", rank,
                                                         " reached the survivors' agreement after it was "
                                                         "decided without it (",
                                                         join_ranks(members), ")"));
  return members;
}

std::string lost_text(const std::vector<ProcessPlace>& places, const std::vector<int>& survivors) {
  std::vector<std::string> nodes;  // of the lost processes, in rank order
  std::map<std::string, std::string> ranks_on;
  std::map<std::string, int> lost_on, total_on;
  for (std::size_t r = 0; r < places.size(); ++r) {
    const std::string& node = places[r].node;
    ++total_on[node];
    if (std::find(survivors.begin(), survivors.end(), static_cast<int>(r)) != survivors.end()) continue;
    if (lost_on[node]++ == 0) nodes.push_back(node);
    ranks_on[node] +=
        ::dynatrain::detail::concat(ranks_on[node].empty() ? "" : ", ", "rank ", r, " (pid ", places[r].pid, ")");
  }
  std::string out;
  for (const std::string& node : nodes)
    out +=
        ::dynatrain::detail::concat(out.empty() ? "" : " and ", ranks_on[node], " on node ", node,
                                    lost_on[node] == total_on[node] && node != "(unknown)" ? " (the whole node)" : "");
  return out;
}

}  // namespace dynatrain::job
