// Copies of source ranks' state kept by other processes (plan::SwitchPlacement::copies): where
// their buffers sit on the process that keeps them. Shared by the planner and the checker.
//
// Invariant: on process p the source side is p's own rank's buffers (ids 0..n-1), then, for each
// copy kept by p in the order of SwitchPlacement::copies, all buffers of the copied rank, ids
// numbered on; a piece's src_buffer names one of them.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/placement.h"
#include "vps/layout.h"

namespace dynatrain::plan {

// The first buffer id of each copy on its process, in SwitchPlacement::copies order.
std::vector<std::uint32_t> copy_bases(const vps::Layout& src, const SwitchPlacement& placement);

// Appends to `layout` (process `process`'s own source buffers) the buffers of every copy that
// process keeps, ids numbered on.
void append_copies(const vps::Layout& src, const SwitchPlacement& placement, int process, vps::RankLayout& layout);

}  // namespace dynatrain::plan
