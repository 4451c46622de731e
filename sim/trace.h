// Every process's schedule for one switch, from the engine itself: all processes run the
// engine's agreement and dry run (TransitionOptions::dry_only) as threads of this process over
// the in-process transport, each recording its ScheduleTrace (exec/schedule_trace.h). No data
// moves and no state memory is allocated; the schedule is the one the real run would execute
// with the same plan, memory budget, topology and allocator kind. The in-process transport
// places the processes on nodes of `options.topology.gpus_per_node` ranks (Transport::node_of),
// so the engine's link classes (TransitionOptions::overlap_links) are those of the cluster.
#pragma once

#include <array>
#include <vector>

#include "exec/engine.h"
#include "exec/schedule_trace.h"
#include "plan/fanout.h"
#include "plan/planner.h"

namespace dynatrain::sim {

// `options.trace` and `options.dry_only` are set per process; the rest is passed through.
// The allocator kind decides zero-copy keeps and page-wise buffers: `pool` true for the
// engine's PoolAllocator (what run-transition and the trainer use), false for the default.
std::vector<exec::ScheduleTrace> trace_switch(const plan::Planner& planner,
                                              const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                              const exec::TransitionOptions& options, bool pool = true);

// Every process's trace of a switch run as node-level fan-out's stages (plan/fanout.h,
// job/fanout_switch.h): each stage traced by the engine as it runs it (stage 0 from the source
// layout to the destination, every later one from the destination layout to itself, in place),
// the stages spliced one after another per process: a process starts a stage once it has done
// the one before (the engine calls run in sequence), and each stage's waves are numbered after
// the previous stage's, so the messages of two stages never pair up. What is not modelled: the
// agreement at the start of each stage (a collective, about 2 ms: plan::FanoutCosts::stage_seconds).
std::vector<exec::ScheduleTrace> trace_fanout(const plan::Planner& planner, const plan::FanoutPlan& fanout,
                                              const std::array<int, vps::kNumStateKinds>& elem_bytes,
                                              const exec::TransitionOptions& options, bool pool = true);

// The plain exchange of a switch (exec::measure_plain_exchange, run-transition's "plain
// exchange"): every process sends each peer the bytes its switch trace sends it, as contiguous
// messages from warm buffers, in the engine's order (XOR steps, then chunks of at most `chunk`
// bytes of the pair), one round posted ahead of the one it waits for. Nothing is packed, kept
// or allocated: the switch's traffic and nothing else. Round r of a pair is its r-th chunk on
// both sides, so the traces pair up.
std::vector<exec::ScheduleTrace> plain_exchange_traces(const std::vector<exec::ScheduleTrace>& switch_traces,
                                                       std::uint64_t chunk);

}  // namespace dynatrain::sim
