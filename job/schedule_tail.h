// The schedule from the current layout on, as the job's leader hands it to the other ranks
// every step (job/job_request.h: JobSync), to processes a grow starts (the prepare's payload,
// edm/device_manager.h: joined_payload) and to a new leader (LeaderState::schedule). It holds
// the switches requests put in. JSON, versioned:
//   {"version": 2, "schedule": "0:CURRENT;STEP:CONFIG;...", "vacate": {"STEP": [1, 3] | "all"}}
// ("schedule" in --schedule syntax, entry 0 the current layout; "vacate": the world ranks a
// switch vacates, or "all" for a whole-job migration).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "vps/parallel_config.h"

namespace dynatrain::job {

inline constexpr int kScheduleTailVersion = 2;

// Entries schedule[next..] after "0:current", and the vacate lists of those entries.
std::string encode_schedule_tail(const vps::ParallelConfig& current,
                                 const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                                 std::size_t next, const std::map<std::int64_t, std::string>& vacate_at);
// The inverse: replaces `schedule` and `vacate_at`. InputError naming an unknown version ("every
// process of a job must run the same dynatrain") or the malformed field (one line).
void decode_schedule_tail(const std::string& text, std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                          std::map<std::int64_t, std::string>& vacate_at);

}  // namespace dynatrain::job
