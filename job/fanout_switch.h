// A switch run as node-level fan-out's stages (plan/fanout.h): stage 1 moves the plan without
// the relayed receives and the trees' later hops; every later stage (destination layout to
// itself, in place) keeps every buffer and lets holders pass boxes on: from node to node (a
// tree), then inside each node (relays). Each is an exec::run_transition call, so each is
// collective over `world` like one switch.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/transport.h"
#include "exec/engine.h"
#include "plan/fanout.h"
#include "sim/cluster.h"
#include "vps/layout.h"

namespace dynatrain::job {

// Runs `fanout`'s stages for process `world.rank()` (its plans, or empty ones when the plan
// spans fewer processes). `src` is consumed as by run_transition; on return `dst` holds the
// destination. The stats are every stage's together: times, bytes and messages added, the
// peak the largest; `path` names the stages. `stage1_seconds`, when given,
// receives stage 1's time on this process (all of it when not applied).
exec::TransitionStats run_fanout_switch(const plan::FanoutPlan& fanout, const vps::RankLayout& src_layout,
                                        std::vector<std::byte*>& src, const vps::RankLayout& dst_layout,
                                        std::vector<std::byte*>& dst, const vps::ElemBytes& elem_bytes,
                                        comm::Transport& world, exec::StateAllocator& alloc,
                                        const exec::TransitionOptions& options, double* stage1_seconds = nullptr);

// The rates fan-out's rule weighs, from a cluster description: a process's own link inside a
// node, its path to the network alone (the smaller of its PCIe link and a NIC), the node's NICs
// together. A cluster without NICs (one node) gets its intra-node rates.
plan::FanoutCosts fanout_costs(const sim::Cluster& cluster);

}  // namespace dynatrain::job
