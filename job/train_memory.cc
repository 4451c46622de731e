#include "job/train_memory.h"

#include <algorithm>

#include "exec/engine.h"
#include "job/memory_check.h"
#include "train/state.h"
#include "vps/layout.h"

namespace dynatrain::job {

void check_train_memory(const train::TrainerOptions& options,
                        const std::vector<std::pair<std::int64_t, vps::ParallelConfig>>& schedule,
                        comm::Transport& world) {
  const vps::LayoutOptions lo =
      train::trainer_layout_options(options.bucket_elems,
                                    {vps::StateKind::kParam, vps::StateKind::kGrad, vps::StateKind::kMaster,
                                     vps::StateKind::kExpAvg, vps::StateKind::kExpAvgSq},
                                    options.bf16);
  std::uint64_t state = 0;
  std::string largest;
  for (const auto& [step, config] : schedule) {
    if (world.rank() >= config.world_size()) continue;
    const vps::Layout layout(options.model, config, lo);
    const auto bytes = static_cast<std::uint64_t>(layout.rank_layout(world.rank()).bytes(lo));
    if (bytes > state) {
      state = bytes;
      largest = config.str();
    }
  }
  const std::uint64_t staging = std::min<std::uint64_t>(exec::TransitionOptions{}.mem_budget, state);
  check_node_memory(world, state + staging + (std::uint64_t{128} << 20),
                    "training model '" + options.model.name + "'" + (largest.empty() ? "" : " in " + largest),
                    "use more processes (a layout that splits the model further), a smaller model, or more memory");
}

}  // namespace dynatrain::job
