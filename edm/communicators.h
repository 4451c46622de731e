// Communicators of one layout on one world, and the cache that makes a layout seen before cost
// no new communicator.
//
//   Communicators::create(parent, config)  splits `parent` once per group kind the layout has
//                                          (rank_order.h: 7, plus etp and dpcp where etp > 1,
//                                          cp > 1), collective over every rank of `parent`.
//   CommunicatorCache::get(parent, members, config)
//                                          the Communicators of `config` whose ranks are the
//                                          processes `members[0 .. config.world_size())`;
//                                          created on a miss, shared on a hit.
//
// Cache contract:
//  * get() is collective over `parent` (every rank calls it with equal arguments, in the same
//    order), because a miss splits. Hit or miss is decided by parent rank 0 and broadcast, so
//    ranks that joined the world later (and lack the history) take the same branch. Ranks of
//    the layout always hold the entry when rank 0 does: the key names the processes of the
//    layout, and process ids are never reused (device_manager.h).
//  * Entries of a layout that includes a process that has left must be dropped
//    (drop_member) before that process is gone; communicators never outlive their members.
//  * creations() counts split() calls made by this cache (the report's "communicator
//    creations"); a layout switched back to adds 0.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "edm/rank_order.h"

namespace dynatrain::edm {

// Identity of a process for the lifetime of a job (rank order of the world can change).
using ProcessId = std::uint64_t;

class Communicators {
 public:
  // Collective over `parent`. Ranks outside the layout hold no group (group() throws there).
  static std::unique_ptr<Communicators> create(comm::Transport& parent, const vps::ParallelConfig& config);

  const vps::ParallelConfig& config() const { return config_; }
  bool member() const { return groups_[static_cast<int>(Group::kActive)] != nullptr; }
  // Whether this rank holds a group of kind g (a member, and the layout has it: group_needed).
  bool has(Group g) const { return groups_[static_cast<int>(g)] != nullptr; }
  // The group of kind g this rank belongs to; InvariantError on ranks outside the layout.
  comm::Transport& group(Group g) const;

 private:
  vps::ParallelConfig config_;
  std::array<std::unique_ptr<comm::Transport>, kNumGroups> groups_;
};

class CommunicatorCache {
 public:
  std::shared_ptr<const Communicators> get(comm::Transport& parent, const std::vector<ProcessId>& members,
                                           const vps::ParallelConfig& config);
  // Forgets every entry whose layout includes process `id` (no communication).
  void drop_member(ProcessId id);

  std::uint64_t creations() const { return creations_; }
  std::uint64_t hits() const { return hits_; }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<ProcessId> members;  // processes of the layout, in rank order
    std::shared_ptr<const Communicators> comms;
  };
  std::map<std::string, Entry> entries_;
  std::uint64_t creations_ = 0, hits_ = 0;
};

}  // namespace dynatrain::edm
