// A lost process recovered in place (Trainer::recover, job/lost_peer.h): the survivors' world
// replaces the broken one, and one planned switch rebuilds the current layout's state in the
// survivors' layout from what they hold (the lost processes hold nothing:
// plan::SwitchPlacement::lost). Invariant: the step and the data cursor do not change (the
// interrupted step was applied by every survivor or by none: TrainerOptions::commit_barrier,
// and apply_ready_update for a survivor whose barrier alone met the loss).
#include <algorithm>
#include <array>

#include "common/clock.h"
#include "common/error.h"
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

// Which rank of the current layout each survivor holds (process i of the survivors' world), and
// whether every survivor's copies (redundancy 2) are of the step they stand at; InputError
// unless every survivor is at this process's step and none was inside an update's collectives.
std::pair<std::vector<int>, bool> held_ranks(comm::Transport& survivors, int layout_rank, std::int64_t step,
                                             bool copies_current, bool updating) {
  const auto all = comm::all_gather_values(
      survivors, std::array<std::int64_t, 4>{layout_rank, step, copies_current ? 1 : 0, updating ? 1 : 0});
  std::vector<int> held;
  bool copies = true;
  for (const auto& [rank, at, current, in_update] : all) {
    held.push_back(static_cast<int>(rank));
    copies = copies && current != 0;
    if (at != step)
      DT_INPUT_ERROR("the loss came as step ", std::min(at, step), "'s update was applied: some survivors ",
                     "applied it and others did not, so no state is whole; resume from a checkpoint");
    if (in_update != 0)
      DT_INPUT_ERROR("the loss came during step ", step, "'s update, whose ZeRO shards were being exchanged: ",
                     "the survivors applied their part of it and the lost processes' part is gone, so no state ",
                     "is whole; resume from a checkpoint");
  }
  return {held, copies};
}

}  // namespace

// The broken generation is set aside (Abandoned) and the survivors' world takes its place, with
// an EDM of its own; returns the groups of layout `next` there.
std::shared_ptr<const edm::Communicators> Trainer::Impl::take_survivors_world(std::unique_ptr<comm::Transport> w,
                                                                              const vps::ParallelConfig& next) {
  if (edm->preparing()) {  // its collectives met the loss: only its thread is joined
    try {
      edm->wait_prepared();
    } catch (const std::exception&) {
    }
  }
  pending.reset();
  model = StageModel{};
  abandoned().groups.push_back(groups);
  abandoned().edms.push_back(std::move(edm));
  if (own_world) abandoned().worlds.push_back(std::move(own_world));
  own_world = std::move(w);
  edm = std::make_unique<edm::DeviceManager>(*own_world, opt.launcher);
  return edm->cache().get(edm->control(), edm->ids(), next);
}

// The planned switch from what the survivors hold (`held`: the old layout's rank of each
// survivor) into `next`, for this process; InputError naming the boxes no survivor holds.
// With copies (redundancy 2, every survivor's of this step): those whose holders survived are
// sources too; else they are released before the move.
std::unique_ptr<PendingSwitch> Trainer::Impl::plan_recovery(const vps::ParallelConfig& from,
                                                            const vps::ParallelConfig& next,
                                                            const std::vector<int>& held, bool with_copies) {
  const int me = world().rank();
  edm::SurvivorPlacement where = edm::survivor_placement(held, from.world_size());
  auto src = make_layout(from, kMovedKinds), dst = make_layout(next, kMovedKinds);
  plan::Topology topo;
  topo.gpus_per_node = opt.gpus_per_node;
  std::vector<plan::SwitchPlacement::Copy> sources;
  if (with_copies && opt.switch_method == SwitchMethod::kEngine) sources = copy_sources(held);
  if (sources.empty()) release_copies();
  const plan::Planner planner(*src, *dst, topo,
                              {plan::Placement(std::move(where.process_of_rank)), {}, std::move(where.lost), sources});
  if (const auto lost = planner.unheld(); !lost.empty())
    DT_INPUT_ERROR("no surviving process holds ", joined(lost), lost.size() == 4 ? " (and maybe more)" : "", " of ",
                   from.str(), ": the lost processes held the only copy; resume from a checkpoint");
  auto ps = new_pending(next, plan::Placement{}, me);  // rank r of `next` on survivor r
  take_plan(*ps, planner, me);
  ps->own_sources = src->rank_layout(held[static_cast<std::size_t>(me)]).buffers.size();
  std::size_t copied = 0;
  for (const auto& c : sources) copied += c.process == me ? 1 : 0;
  DT_CHECK(copied == copies.held.size(), "process ", me, " is named for ", copied, " copies but holds ",
           copies.held.size());
  return ps;
}

Trainer::Recovery Trainer::recover(std::unique_ptr<comm::Transport> survivors, const vps::ParallelConfig& to) {
  Impl& im = *impl_;
  const auto t0 = Clock::now();
  const vps::ParallelConfig from = im.cfg();
  DT_CHECK(im.layout_rank < from.world_size(), "recover() on a process outside layout ", from.str());
  vps::ParallelConfig next = to;
  check_supported(im.opt, next);
  DT_CHECK(next.world_size() <= survivors->size(), "layout ", next.str(), " for ", survivors->size(), " survivors");
  im.ready_update.reset();  // the survivors agreed on the step: its update is applied or not
  const auto [held, copies_current] =
      held_ranks(*survivors, im.layout_rank, im.step, im.copies.on() && im.copies.step == im.step, im.updating);
  edm::Prepared p;
  p.config = next;
  p.world_before = from.world_size();
  p.world_after = survivors->size();
  p.comms = im.take_survivors_world(std::move(survivors), next);
  std::array<double, 3> mine_s = {seconds_since(t0), 0, 0};  // groups, prefault, probe
  im.pending = im.plan_recovery(from, next, held, copies_current);
  // No prepare ran ahead: the memory the rebuild needs beyond what the source gives back is made
  // resident now, in huge pages where the pool can, rather than faulted in during the move.
  const auto tf = Clock::now();
  im.pending->prefaulted = im.prefault_for(*im.pending);
  im.world().barrier();  // the move starts together: waiting for the slowest survivor's memory is memory
  mine_s[1] = seconds_since(tf);
  Recovery out;
  SwitchStats& st = out.stats;
  st.from = from.str();
  st.to = next.str();
  st.method = SwitchMethod::kEngine;
  st.world_before = from.world_size();
  st.world_after = im.world().size();
  CommitFigures mine;
  const auto tm = Clock::now();
  im.move_state(im.world(), p, mine, st);  // state_intact() false until it adopts `next`
  mine.total_s = seconds_since(tm);
  mine.plan_s = seconds_since(t0) - mine_s[0] - mine_s[1] - mine.total_s;  // placement and planner
  mine.start = std::chrono::duration<double>(tm.time_since_epoch()).count();
  const auto tp = Clock::now();
  im.report_commit(im.world(), p, mine, st);
  mine_s[2] = seconds_since(tp);
  im.pending.reset();
  for (const auto& f : comm::all_gather_values(im.world(), mine_s))
    out.groups_s = std::max(out.groups_s, f[0]), out.prefault_s = std::max(out.prefault_s, f[1]);
  out.probe_s = mine_s[2];
  return out;
}

bool Trainer::state_intact() const { return !impl_->moving; }

bool Trainer::update_ready() const { return impl_->ready_update.has_value(); }

std::size_t Trainer::reserve_for(const vps::ParallelConfig& next) {
  Impl& im = *impl_;
  const auto dst = im.make_layout(next);
  std::size_t most = 0;
  for (int r = 0; r < next.world_size(); ++r) most = std::max(most, state_bytes(dst->rank_layout(r), im.elem()));
  const std::size_t src = state_bytes(im.rank_layout, im.elem());
  // The most a move could take: into the largest rank, sending at most all of this one's state.
  return im.pool.prefault(Impl::memory_beyond_source(src, most, most + src));
}

StepStats Trainer::apply_ready_update() {
  Impl& im = *impl_;
  DT_CHECK(im.ready_update.has_value(), "apply_ready_update() without a step whose update is ready");
  const Impl::ReadyUpdate u = *im.ready_update;
  im.apply_update(true);
  return im.step_done(u.loss, u.t0);
}

}  // namespace dynatrain::train
