// What the survivors of a lost process need on a c10d world (torch-free; job/lost_peer.h uses
// it for `dynatrain train` on torch.distributed, as python/dynatrain/_recover.py does for an
// adopted model): give the broken generation's groups up; then agree through the rendezvous
// store and build the survivors' world over it (c10d_membership.h).
#pragma once

namespace dynatrain::comm {

// Shuts down every connection of the Gloo groups this process built so far (every c10d world
// and split: their sockets are recorded as they are made), so a survivor blocked on another
// survivor in one of them gets an error at once instead of at the group's timeout. The groups
// are unusable afterwards. Listening sockets and the store's connections stay. Returns how
// many connections it shut down.
int abandon_c10d_groups();

}  // namespace dynatrain::comm
