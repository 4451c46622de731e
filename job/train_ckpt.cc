#include "job/train_ckpt.h"

#include <chrono>
#include <cstdio>

#include "common/error.h"
#include "job/fault_injection.h"
#include "common/clock.h"

namespace dynatrain::job {

namespace {

// The trainer keeps one pool block per buffer (train/state.h).
ckpt::Arenas view(train::Arenas& a) {
  ckpt::Arenas out;
  out.buffer = [&a](const vps::LocalBuffer& b) { return a.bytes(b); };
  return out;
}


const std::vector<vps::StateKind>& saved_kinds() {
  static const std::vector<vps::StateKind> kinds = vps::parse_state_kinds("param,master,exp_avg,exp_avg_sq");
  return kinds;
}

}  // namespace

void save_trainer(const std::string& dir, std::int64_t step, train::Trainer& trainer, comm::Transport& world) {
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 (in every layout) writes the index; its progress is the job's.
  const auto p = trainer.progress();
  if (world.rank() == 0) DT_CHECK_EQ(p.step, step);
  const nlohmann::json state = {{"step", step}, {"data_seed", p.data_seed}, {"data_position", p.data_position}};
  // Fault tests kill a rank at a chosen phase of the save (job/fault_injection.h).
  const auto observer = [](ckpt::SavePhase phase, int rank) { fault_point(ckpt::save_phase_name(phase), rank); };
  ckpt::save(dir, step, trainer.layout(), saved_kinds(), view(trainer.arenas()), state, world, observer);
  if (world.rank() == 0) {
    std::printf("saved checkpoint of step %lld to %s/%s in %.3f s\n", static_cast<long long>(step),
                dir.c_str(), ckpt::step_dir_name(step).c_str(), seconds_since(t0));
    std::fflush(stdout);
  }
}

void resume_trainer(const ckpt::Checkpoint& c, train::Trainer& trainer, comm::Transport& world) {
  const auto t0 = std::chrono::steady_clock::now();
  // Identical on every rank (same index, same flags): a --bf16 checkpoint holds 2-byte params.
  const int saved = c.elem_bytes[static_cast<int>(vps::StateKind::kParam)];
  const int here = trainer.layout().options().elem_bytes[static_cast<int>(vps::StateKind::kParam)];
  if (saved != here)
    DT_INPUT_ERROR("checkpoint '", c.step_dir, "' holds ", saved == 2 ? "bf16" : "fp32", " params (saved ",
                   saved == 2 ? "with" : "without", " --bf16); resume it ", saved == 2 ? "with" : "without", " --bf16");
  ckpt::LoadStats stats;
  ckpt::on_all_ranks(world, "checkpoint load", [&] {
    if (trainer.active()) stats = ckpt::load_rank(c, trainer.layout(), world.rank(), view(trainer.arenas()));
  });
  train::Trainer::Progress p;
  try {
    p.step = c.trainer.at("step").get<std::int64_t>();
    p.data_seed = c.trainer.at("data_seed").get<std::uint64_t>();
    p.data_position = c.trainer.at("data_position").get<std::uint64_t>();
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint '", c.step_dir, "' holds no trainer progress (step, data cursor): ", e.what());
  }
  trainer.restore_progress(p);
  world.barrier();
  if (world.rank() == 0) {
    std::printf("resumed from %s (saved in %s, %zu files) into %s: step %lld, %.3f s, rank 0 read %.1f MB\n",
                c.step_dir.c_str(), c.config.str().c_str(), c.files.size(), trainer.config().str().c_str(),
                static_cast<long long>(p.step), seconds_since(t0), stats.bytes_read / 1e6);
    std::fflush(stdout);
  }
}

}  // namespace dynatrain::job
