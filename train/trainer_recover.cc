// A lost process recovered in place (Trainer::recover, job/lost_peer.h): the survivors' world
// replaces the broken one, and one planned switch rebuilds the current layout's state in the
// survivors' layout from what they hold (the lost processes hold nothing:
// plan::SwitchPlacement::lost). Invariant: the step and the data cursor do not change (the
// interrupted step was applied by no survivor: TrainerOptions::commit_barrier).
#include <algorithm>
#include <array>

#include "common/clock.h"
#include "common/error.h"
#include "edm/new_rank.h"
#include "edm/survivor_placement.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

namespace {

// The given-up generation: its EDM (and the prepare thread it may have had, which met the
// loss too), its groups and its world are never destroyed: their destructors would wait on
// connections to a process that is gone. The job ends with _exit (edm/store_launcher.h).
struct Abandoned {
  std::vector<std::unique_ptr<edm::DeviceManager>> edms;
  std::vector<std::unique_ptr<comm::Transport>> worlds;
  std::vector<std::shared_ptr<const edm::Communicators>> groups;
};
Abandoned& abandoned() {
  static auto* a = new Abandoned;  // never destroyed, on purpose (above)
  return *a;
}

std::string joined(const std::vector<std::string>& boxes) {
  std::string out;
  for (const auto& b : boxes) out += (out.empty() ? "" : ", ") + b;
  return out;
}

}  // namespace

Trainer::Recovery Trainer::recover(std::unique_ptr<comm::Transport> survivors, const vps::ParallelConfig& to) {
  Impl& im = *impl_;
  const auto t0 = Clock::now();
  const vps::ParallelConfig from = im.cfg();
  DT_CHECK(im.layout_rank < from.world_size(), "recover() on a process outside layout ", from.str());
  vps::ParallelConfig next = to;
  check_supported(im.opt, next);
  DT_CHECK(next.world_size() <= survivors->size(), "layout ", next.str(), " for ", survivors->size(), " survivors");
  // Which rank of the current layout each survivor holds (process i of the survivors' world),
  // and the step each is at.
  const auto all = comm::all_gather_values(*survivors, std::array<std::int64_t, 2>{im.layout_rank, im.step});
  std::vector<int> held;
  for (const auto& [rank, step] : all) {
    held.push_back(static_cast<int>(rank));
    if (step != im.step)
      DT_INPUT_ERROR("the loss came as step ", std::min(step, im.step), "'s update was applied: some survivors ",
                     "applied it and others did not, so no state is whole; resume from a checkpoint");
  }

  if (im.edm->preparing()) {  // its collectives met the loss: only its thread is joined
    try {
      im.edm->wait_prepared();
    } catch (const std::exception&) {
    }
  }
  im.pending.reset();
  im.model = StageModel{};
  abandoned().groups.push_back(im.groups);
  abandoned().edms.push_back(std::move(im.edm));
  if (im.own_world) abandoned().worlds.push_back(std::move(im.own_world));
  im.own_world = std::move(survivors);
  im.edm = std::make_unique<edm::DeviceManager>(*im.own_world, im.opt.launcher);
  comm::Transport& w = im.world();
  const int me = w.rank();

  edm::SurvivorPlacement where = edm::survivor_placement(held, from.world_size());
  auto src = im.make_layout(from, kMovedKinds), dst = im.make_layout(next, kMovedKinds);
  plan::Topology topo;
  topo.gpus_per_node = im.opt.gpus_per_node;
  const plan::Planner planner(*src, *dst, topo,
                              {plan::Placement(std::move(where.process_of_rank)), {}, std::move(where.lost)});
  if (const auto lost = planner.unheld(); !lost.empty())
    DT_INPUT_ERROR("no surviving process holds ", joined(lost), lost.size() == 4 ? " (and maybe more)" : "", " of ",
                   from.str(), ": the lost processes held the only copy; resume from a checkpoint");

  auto ps = std::make_unique<PendingSwitch>();
  ps->next = next;
  ps->new_rank = edm::new_rank_of(ps->placement, me, next.world_size());
  ps->dst_full = im.make_layout(next);
  ps->dst_full_rl = ps->dst_full->rank_layout(edm::held_rank_index(ps->new_rank, next.world_size(), me));
  ps->plan = planner.plan_rank(me);
  ps->src_rl = planner.src_rank_layout(me);
  ps->dst_rl = planner.dst_rank_layout(me);
  im.pending = std::move(ps);

  edm::Prepared p;
  p.config = next;
  p.world_before = from.world_size();
  p.world_after = w.size();
  p.comms = im.edm->cache().get(im.edm->control(), im.edm->ids(), next);
  CommitFigures mine;
  SwitchStats st;
  im.move_state(w, p, mine, st);  // state_intact() false until it adopts `next`
  im.pending.reset();
  return {seconds_since(t0), mine.received};
}

bool Trainer::state_intact() const { return !impl_->moving; }

}  // namespace dynatrain::train
