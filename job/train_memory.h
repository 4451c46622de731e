// The up-front memory check of `dynatrain train` (job/memory_check.h): refuses, before the
// trainer allocates anything, a schedule whose layouts cannot fit in the nodes' memory.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comm/transport.h"
#include "train/trainer.h"
#include "vps/parallel_config.h"

namespace dynatrain::job {

// Collective over `world`. Per rank: the largest state it holds in any layout of `schedule`
// (weights, grads, fp32 master, both Adam moments, as the trainer lays them out) plus the
// switch engine's staging budget and 128 MiB for the runtime. Activations are not counted (they
// are small next to the state for the models and batches the reference trainer runs).
void check_train_memory(const train::TrainerOptions& options,
                        const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                        comm::Transport& world);

}  // namespace dynatrain::job
