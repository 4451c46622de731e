// What the survivors of a lost process need on a c10d world (torch-free; job/lost_peer.h uses
// it for `dynatrain train` on torch.distributed, as python/dynatrain/_recover.py does for an
// adopted model): give the broken generation's groups up, agree through the rendezvous store,
// and build the survivors' world over that store without the lost process.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/key_store.h"
#include "comm/transport.h"

namespace dynatrain::comm {

// Whether `world` is a transport of this backend (the functions below need one).
bool is_c10d_world(const Transport& world);

// Shuts down every connection of the Gloo groups this process built so far (every c10d world
// and split: their sockets are recorded as they are made), so a survivor blocked on another
// survivor in one of them gets an error at once instead of at the group's timeout. The groups
// are unusable afterwards. Listening sockets and the store's connections stay. Returns how
// many connections it shut down.
int abandon_c10d_groups();

// A new connection to `world`'s rendezvous store (its own: a thread blocked on the old one
// cannot hold it up). Every call on it waits at most `timeout`. CommError when it cannot connect.
std::unique_ptr<KeyStore> c10d_key_store(const Transport& world, std::chrono::milliseconds timeout);

// Collective over `members` (ranks of `world`, ascending; this rank among them): a world of
// them, rank i being members[i], built through the rendezvous store under `key` (unique to this
// world) on a connection of its own, with no call on `world`'s groups. Its splits build over
// that connection. CommError when a member does not come within `world`'s timeout.
std::unique_ptr<Transport> c10d_members_world(const Transport& world, const std::string& key,
                                              const std::vector<int>& members);

}  // namespace dynatrain::comm
