// Who belongs to a c10d job, kept in its rendezvous store (the TCPStore world rank 0 of the
// job's first world hosts): keys every process reaches outside the job's groups, and worlds of
// chosen members built over that store. The survivors of a lost process agree and rebuild
// through it (job/lost_peer.h), and processes join a running job through it
// (edm/store_launcher.h). Torch-free (dt_comm_c10d links libtorch privately).
//
// Invariant: every world built here gets a store prefix of its own (`dynatrain/<key>`, the same
// on each member), so its groups and their splits never meet another world's keys.
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

// `world`'s store prefix: one name per world, the same on each of its members.
std::string c10d_world_name(const Transport& world);

// Where `world`'s rendezvous store listens, "HOST:PORT" (what a joining process connects to).
std::string c10d_store_address(const Transport& world);

// A new connection to `world`'s rendezvous store (its own: a thread blocked on the old one
// cannot hold it up). Every call on it waits at most `timeout`. CommError when it cannot connect.
std::unique_ptr<KeyStore> c10d_key_store(const Transport& world, std::chrono::milliseconds timeout);

// The same from a process outside the job: the store at `address` ("HOST:PORT"), trying to
// connect for up to `timeout`. InputError for an address that is not HOST:PORT; CommError when
// nothing answers.
std::unique_ptr<KeyStore> c10d_connect_store(const std::string& address, std::chrono::milliseconds timeout);

// Collective over `members` (ranks of `world`, ascending; this rank among them): a world of
// them, rank i being members[i], built through the rendezvous store under `key` (unique to this
// world) on a connection of its own, with no call on `world`'s groups. Its splits build over
// that connection. CommError when a member does not come within `world`'s timeout.
std::unique_ptr<Transport> c10d_members_world(const Transport& world, const std::string& key,
                                              const std::vector<int>& members);

// Collective over the `size` processes of a grown job: the processes of `world` (ranks
// 0..world.size()-1, this one `world.rank()`) and the joiners (the rest), a world built under
// `key` over `world`'s store. CommError when a process does not come within `world`'s timeout.
std::unique_ptr<Transport> c10d_grown_world(const Transport& world, const std::string& key, int size);

// A joining process's side of the same collective: rank `rank` of `size`, over the store at
// `address`, waiting up to `timeout` for the others.
std::unique_ptr<Transport> c10d_joined_world(const std::string& address, const std::string& key, int rank, int size,
                                             std::chrono::milliseconds timeout);

}  // namespace dynatrain::comm
