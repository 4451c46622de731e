// Launcher of a job whose world the environment describes (torch.distributed's way: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT from `dynatrain launch`, torchrun or a scheduler; the
// world runs over c10d, comm/c10d). Processes leave it (a shrink, a vacated notice); none are
// started (a grow is refused by name).
//
// Invariant: world rank 0 of the job's first world hosts the rendezvous store (a TCPStore in
// its process) over which every later group of the job is built, so it never leaves while the
// job goes on: a vacate naming it is refused (cannot_vacate), and a placement must keep it. The
// trainer's placements give new rank 0 to process 0 (plan::Placement, "rank 0 kept on process
// 0"), so the store's host stays world rank 0 of every world the job adopts.
#pragma once

#include <memory>

#include "edm/launcher.h"

namespace dynatrain::edm {

std::unique_ptr<Launcher> make_store_launcher();

}  // namespace dynatrain::edm
