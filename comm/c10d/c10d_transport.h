// torch.distributed (c10d) backend of comm::Transport: ranks are processes (or threads) that
// met through a c10d TCPStore, talking over a c10d ProcessGroupGloo (CPU, TCP).
//
//   C10dOptions o;  o.rank = 1;  o.size = 4;  o.master_addr = "127.0.0.1";  o.master_port = 29500;
//   auto world = c10d_world(o);                  // rank 0 hosts the TCPStore
//   auto world = c10d_world_from_env();          // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//
// This header is torch-free (the library dt_comm_c10d links libtorch privately); a caller that
// already holds a c10d ProcessGroup uses process_group_transport.h instead.
//
// Facts a caller may rely on (comm/README.md, "c10d"):
//  * Every Transport call keeps the contract of transport.h: sizes are checked (a receive that
//    meets a message of another size throws CommError, after draining it), matching is by
//    (source, tag) in posting order, messages to self are matched in this process.
//  * runs_direct() is false for every peer: Gloo has no cross-memory attach, so scattered
//    messages are packed (the engine's stats count them as packed).
//  * Failures (a peer gone, a timeout) throw CommError naming the rank, the operation and
//    Gloo's message; the communicator must then be rebuilt.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/transport.h"

namespace dynatrain::comm {

struct C10dOptions {
  int rank = 0, size = 1;  // 0 <= rank < size
  // Where rank 0 hosts the c10d TCPStore (the rendezvous) and every rank connects.
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 1..65535 (0 for a store that picks a free port: run_c10d_ranks)
  // Rendezvous and every blocking operation give up after this long (CommError).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Address the Gloo device of this rank binds to. Empty: 127.0.0.1 when master_addr is a
  // loopback address (one host), else the interface GLOO_SOCKET_IFNAME names, else the address
  // this host's name resolves to (c10d's default device).
  std::string bind_host;
  // When not empty: what this process runs (`train`), which every rank must share with every
  // other (ranks running different commands would wait in different collectives); compared
  // through the store right after the rendezvous, InputError naming the first difference.
  std::string command;
};

// Collective over the `size` ranks: rendezvous through a TCPStore at master_addr:master_port
// (rank 0 starts it) and a Gloo process group over it. Bad options: InputError; the
// rendezvous failing (port taken, a rank missing past the timeout): CommError.
std::unique_ptr<Transport> c10d_world(const C10dOptions& options);

// The world torchrun (or `dynatrain launch`, or a scheduler) describes in the environment:
// RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500), and
// DT_RENDEZVOUS_S, the seconds the rendezvous and every blocking operation wait (default 300);
// its `command` is this process's subcommand (argv[1] of /proc/self/cmdline).
// nullptr when RANK or WORLD_SIZE is unset; InputError naming the variable when a value is
// malformed; a rendezvous that times out: CommError naming what it waited for and the variable.
std::unique_ptr<Transport> c10d_world_from_env();

// For tests: runs body(rank's world transport) on n threads of this process, each with its own
// Gloo process group over one TCPStore on 127.0.0.1 at a free port; joins them and rethrows
// the first exception (peers of a failed rank see its group closed and fail too, or time out).
void run_c10d_ranks(int n, const std::function<void(Transport&)>& body,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace dynatrain::comm
