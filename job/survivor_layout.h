// The layout a job keeps training in when it has fewer processes: after a lost process (a
// restart, job/supervisor.h) or a preemption notice (the vacating switch, job/notice.h), for the
// CLI trainer and for an adopted PyTorch model alike; each says which layouts it can run.
#pragma once

#include <functional>
#include <optional>

#include "vps/parallel_config.h"

namespace dynatrain::job {

// Of the layouts `runs` accepts on at most `processes` processes (tp x pp x dp processes; cp =
// etp = 1; zero kept; ep a divisor of previous.ep): the most processes, then the same tp as
// `previous`, then the same pp, then the same ep, then the most dp. nullopt when `runs` accepts
// none, even on one process.
std::optional<vps::ParallelConfig> survivor_layout(const vps::ParallelConfig& previous, int processes,
                                                   const std::function<bool(const vps::ParallelConfig&)>& runs);

}  // namespace dynatrain::job
