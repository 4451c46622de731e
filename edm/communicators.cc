#include "edm/communicators.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace dynatrain::edm {

std::unique_ptr<Communicators> Communicators::create(comm::Transport& parent, const vps::ParallelConfig& config) {
  auto c = std::make_unique<Communicators>();
  c->config_ = config;
  for (Group g : kAllGroups) {
    if (!group_needed(config, g)) continue;  // the same on every rank: the config is
    const Colour col = group_colour(config, parent.rank(), g);
    c->groups_[static_cast<int>(g)] = parent.split(col.colour, col.key);
  }
  return c;
}

comm::Transport& Communicators::group(Group g) const {
  const auto& t = groups_[static_cast<int>(g)];
  DT_CHECK(t != nullptr, "no ", group_name(g), " group: this rank is outside layout ", config_.str(),
           " or the layout has none (group_needed)");
  return *t;
}

namespace {
std::string cache_key(const std::vector<ProcessId>& members, const vps::ParallelConfig& config) {
  std::ostringstream os;
  os << config.str() << " @";
  for (std::size_t i = 0; i < static_cast<std::size_t>(config.world_size()); ++i) os << ' ' << members.at(i);
  return os.str();
}
}  // namespace

std::shared_ptr<const Communicators> CommunicatorCache::get(comm::Transport& parent,
                                                            const std::vector<ProcessId>& members,
                                                            const vps::ParallelConfig& config) {
  DT_CHECK(static_cast<int>(members.size()) == parent.size(), "members list has ", members.size(),
           " entries for a world of ", parent.size());
  DT_CHECK(config.world_size() <= parent.size(), "layout ", config.str(), " needs more ranks than the world's ",
           parent.size());
  const std::string key = cache_key(members, config);
  auto it = entries_.find(key);
  char hit = it != entries_.end() ? 1 : 0;
  parent.broadcast(&hit, 1, 0);
  const bool in_layout = parent.rank() < config.world_size();
  if (hit) {
    ++hits_;
    if (!in_layout) return nullptr;
    DT_CHECK(it != entries_.end(), "rank ", parent.rank(), " of layout ", config.str(),
             " lacks the cached communicators rank 0 holds");
    return it->second.comms;
  }
  std::shared_ptr<const Communicators> comms = Communicators::create(parent, config);
  creations_ += static_cast<std::uint64_t>(groups_needed(config));
  if (!in_layout) return nullptr;
  entries_[key] = Entry{std::vector<ProcessId>(members.begin(), members.begin() + config.world_size()), comms};
  return comms;
}

void CommunicatorCache::drop_member(ProcessId id) {
  std::erase_if(entries_, [id](const auto& kv) {
    const auto& m = kv.second.members;
    return std::find(m.begin(), m.end(), id) != m.end();
  });
}

}  // namespace dynatrain::edm
