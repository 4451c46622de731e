// What one rank's run of the engine does, in order: the engine's own schedule, recorded by the
// dry run that precedes the real one (TransitionOptions::trace). The switch-time simulator
// (sim/simulator.h) plays every rank's trace through a model of the cluster's links.
//
// Events, in the order the rank performs them:
//   kPost   round `round` of the exchange with `peer` in wave `wave`: `pack_bytes` are copied
//           into staging (0 when the chunk goes straight from the source buffer), then a send of
//           `send_bytes` and a receive of `recv_bytes` are posted (either may be 0: no message);
//           `send_runs` / `recv_runs`: the byte runs (adjacent ones merged) of this side of each
//           message, 1 unless it moves straight between scattered runs (Transport::runs_direct:
//           one iovec per run in the kernel's cross-memory copy, comm/README.md)
//   kKeep   `bytes` copied locally (one kept piece; zero-copy keeps are not events)
//   kWait   the rank finishes its oldest round in flight (`wave`, `peer`, `round`): it waits for
//           the receive, copies `unpack_bytes` out of staging (0: received straight into the
//           destination), then waits for the send
//   kFresh  `bytes` of destination memory asked of the allocator (a buffer or a granule);
//           free when the pool recycles pages (warm), first touch when it does not (cold)
// The engine keeps up to TransitionStats::rounds_in_flight rounds in flight per link class
// (exec/README.md); kWaits come in the rank's round order, posts ahead of them.
#pragma once

#include <cstdint>
#include <vector>

namespace dynatrain::exec {

struct ScheduleEvent {
  enum class Kind : std::uint8_t { kPost, kKeep, kWait, kFresh };
  Kind kind = Kind::kKeep;
  int wave = 0, peer = -1;
  std::uint32_t round = 0;
  std::uint64_t send_bytes = 0, recv_bytes = 0;
  std::uint64_t pack_bytes = 0;                // kPost: copied into staging before the send
  std::uint64_t unpack_bytes = 0;              // kWait: copied out of staging after the receive
  std::uint64_t bytes = 0;                     // kKeep, kFresh
  std::uint32_t send_runs = 1, recv_runs = 1;  // kPost: runs of this side of the send / receive
};

struct ScheduleTrace {
  int rank = 0, world = 0;
  std::vector<ScheduleEvent> events;

  void post(int wave, int peer, std::uint32_t round, std::uint64_t send, bool packed, std::uint64_t recv,
            std::uint32_t send_runs = 1, std::uint32_t recv_runs = 1) {
    events.push_back(
        {ScheduleEvent::Kind::kPost, wave, peer, round, send, recv, packed ? send : 0, 0, 0, send_runs, recv_runs});
  }
  void wait(int wave, int peer, std::uint32_t round, std::uint64_t unpack) {
    events.push_back({ScheduleEvent::Kind::kWait, wave, peer, round, 0, 0, 0, unpack, 0});
  }
  void keep(std::uint64_t bytes) { events.push_back({ScheduleEvent::Kind::kKeep, 0, -1, 0, 0, 0, 0, 0, bytes}); }
  void fresh(std::uint64_t bytes) { events.push_back({ScheduleEvent::Kind::kFresh, 0, -1, 0, 0, 0, 0, 0, bytes}); }
};

}  // namespace dynatrain::exec
