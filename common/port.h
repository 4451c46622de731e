// A TCP port on this host: whether a port is free, or a free one the kernel picks.
#pragma once

namespace dynatrain {

// Binds a socket to `port` (0: any free port) on 127.0.0.1, or on every address with
// `any_address`, and closes it again. Returns the port bound, or -1 with errno set when the bind
// failed (the port is taken). The port is free when this returns; another process may take it
// before the caller binds it again.
int probe_port(int port, bool any_address = false);

}  // namespace dynatrain
