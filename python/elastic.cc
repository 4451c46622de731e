#include "python/elastic.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <sstream>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "edm/new_rank.h"
#include "edm/survivor_placement.h"
#include "edm/vacate.h"
#include "plan/placement.h"
#include "plan/planner.h"
#include "common/clock.h"

namespace dynatrain::python {

namespace {

// Rank 0's figures of the switch that every process reports alike (processes it started did
// not see the world before it).
struct Carried {
  std::int32_t world_before = 0;
  double spawn_seconds = 0;
};

// Why the job's processes cannot change ("" if they can): rank 0's answer, on every rank.
// Processes that leave must end without MPI_Finalize, and so must every process once a grow
// connected two Open MPI jobs: measured, MPI_Finalize then never returns.
std::string world_change_refusal(comm::Transport& world, const edm::Launcher& launcher, const ElasticRequest& r) {
  std::string why;
  if (world.rank() == 0) {
    const std::string cannot = launcher.cannot_leave();
    if (!cannot.empty()) why = "switch to " + r.to.str() + " would change the job's processes: " + cannot;
  }
  comm::broadcast_string(world, why);
  return why;
}

// The commit, on starters and joiners alike: carry, plan, move, adopt the new world. Times count
// from `t0`, or on a joined process from the moment the starters' commit reached it (before
// that it waited for them, while they trained).
ElasticOutcome commit(Manager& m, const edm::Prepared& p, std::string job, const std::string& mine,
                      Clock::time_point t0, bool joined) {
  edm::DeviceManager& dm = m.elastic()->edm();
  comm::Transport& tw = dm.transition_world();
  ElasticOutcome out;
  Carried carried{static_cast<std::int32_t>(p.world_before), p.spawn_seconds};
  tw.broadcast(&carried, sizeof(carried), 0);
  if (joined) t0 = Clock::now();
  comm::broadcast_string(tw, job);
  out.job = std::move(job);
  out.mine = comm::all_gather_strings(tw, mine);
  out.mine.resize(static_cast<std::size_t>(carried.world_before));  // processes started now carry nothing
  out.world_before = carried.world_before;
  out.spawn_seconds = carried.spawn_seconds;

  const plan::Placement placement(p.process_of_rank);
  const int me = tw.rank(), ranks = p.config.world_size();
  const int new_rank = edm::new_rank_of(placement, me, ranks);
  auto next = std::make_unique<vps::Layout>(m.make_layout(p.config));
  const plan::Planner planner(m.layout(), *next, m.options().topology, {{}, placement, {}});
  const plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  out.stats = m.move_state(std::move(next), new_rank, plan, tw, t0);
  out.world_after = p.world_after;

  dm.adopt();  // `p` is gone from here on
  out.left = dm.left();
  m.set_world(out.left ? nullptr : &dm.world());
  return out;
}

// The planner of a recovery: process i of the survivors' world held rank survivors[i] of the
// current layout; the lost ranks sit on processes numbered after them, which hold nothing.
plan::Planner in_place_recovery_planner(const Manager& m, const vps::Layout& next, const std::vector<int>& survivors,
                                        int world_before, std::vector<plan::SwitchPlacement::Copy> copies) {
  if (world_before != m.layout().config().world_size())
    DT_INPUT_ERROR("recovery from ", world_before, " processes, but the layout ", m.layout().config().str(), " has ",
                   m.layout().config().world_size(), " ranks");
  if (next.config().world_size() > static_cast<int>(survivors.size()))
    DT_INPUT_ERROR("a layout of ", next.config().world_size(), " ranks cannot run on the ", survivors.size(),
                   " surviving processes");
  edm::SurvivorPlacement s = edm::survivor_placement(survivors, world_before);
  return plan::Planner(m.layout(), next, m.options().topology,
                       {plan::Placement(std::move(s.process_of_rank)), {}, std::move(s.lost), std::move(copies)});
}

// The copies named for this process must be the ones it holds, in order (the plan's buffer ids),
// without the kinds it does not keep.
void check_held_copies(const Manager& m, const std::vector<plan::SwitchPlacement::Copy>& copies, int me) {
  std::vector<std::pair<int, std::uint32_t>> named, held;
  for (const auto& c : copies)
    if (c.process == me) named.emplace_back(c.rank, c.absent_kinds);
  for (const auto& c : m.copies()) held.emplace_back(c.rank, c.absent_kinds);
  DT_CHECK(named == held, "process ", me, " is named for ", named.size(), " copies but holds ", held.size(),
           " (or holds other kinds of them)");
}

}  // namespace

// The Python side splits its own groups (mpi4py), so the EDM builds none.
Elastic::Elastic(comm::Transport& world, edm::MpiLaunchSettings launch)
    : launcher_(edm::make_mpi_launcher(std::move(launch))),
      edm_(std::make_unique<edm::DeviceManager>(world, launcher_, /*layout_groups=*/false)) {}

std::shared_ptr<Elastic> Elastic::join(edm::MpiLaunchSettings launch) {
  comm::MpiSession::init();
  std::shared_ptr<edm::Launcher> launcher = edm::make_mpi_launcher(std::move(launch));
  std::unique_ptr<comm::Transport> world = launcher->join();
  if (!world) return nullptr;
  std::shared_ptr<Elastic> e(new Elastic(launcher));
  e->edm_ = std::make_unique<edm::DeviceManager>(std::move(world), launcher, /*layout_groups=*/false);
  return e;
}

void prepare_processes(Manager& m, const ElasticRequest& r) {
  comm::Transport& world = m.world();
  if (m.elastic() && m.elastic()->edm().preparing()) DT_INPUT_ERROR("a switch is being prepared already");
  if (const std::string why = vacate_problem(r.vacate, world.size()); !why.empty()) DT_INPUT_ERROR(why);
  m.make_layout(r.to);  // a config the model cannot take: InputError before any communication
  if (!m.elastic()) m.set_elastic(std::make_shared<Elastic>(world, r.launch));
  const std::string refusal = world_change_refusal(world, m.elastic()->launcher(), r);
  if (!refusal.empty()) DT_INPUT_ERROR(refusal);
  m.elastic()->edm().prepare(
      m.layout().config(), r.to, [](const edm::Prepared&) {}, r.payload, edm::vacate_place(r.to.world_size(), r.vacate),
      r.vacate);
}

ElasticOutcome commit_processes(Manager& m, const std::string& job, const std::string& mine, Clock::time_point t0) {
  DT_CHECK(m.elastic() != nullptr && m.elastic()->edm().preparing(), "commit_processes() without a prepare");
  edm::DeviceManager& dm = m.elastic()->edm();
  edm::Prepared& p = dm.wait_prepared();
  if (!p.refused.empty()) {  // decided by rank 0 for every rank: nothing started, nothing moved
    const std::string why = "switch to " + p.config.str() + " refused: " + p.refused;
    dm.discard();
    DT_INPUT_ERROR(why);
  }
  return commit(m, p, job, mine, t0, /*joined=*/false);
}

ElasticOutcome switch_processes(Manager& m, const ElasticRequest& r) {
  const auto t0 = Clock::now();
  prepare_processes(m, r);
  return commit_processes(m, r.job, r.mine, t0);
}

ElasticOutcome switch_in_place(Manager& m, const vps::ParallelConfig& to, const std::vector<int>& vacate) {
  const auto t0 = Clock::now();
  comm::Transport& world = m.world();
  const plan::Placement placement(in_place_placement(to.world_size(), world.size(), vacate));
  auto next = std::make_unique<vps::Layout>(m.make_layout(to));
  const plan::Planner planner(m.layout(), *next, m.options().topology, {{}, placement, {}});
  const int me = world.rank();
  const plan::RankPlan plan = me < planner.world_size() ? planner.plan_rank(me) : plan::RankPlan{me, {}, {}, {}};
  ElasticOutcome out;
  out.world_before = world.size();
  out.world_after = to.world_size();
  const int new_rank = edm::new_rank_of(placement, me, to.world_size());
  out.stats = m.move_state(std::move(next), new_rank, plan, world, t0);
  out.left = new_rank < 0;
  m.set_world(nullptr);  // the old world has processes that leave: the caller gives the new one
  return out;
}

ElasticOutcome recover_in_place(Manager& m, const vps::ParallelConfig& to, const std::vector<int>& survivors,
                                int world_before, const std::vector<plan::SwitchPlacement::Copy>& copies) {
  const auto t0 = Clock::now();
  comm::Transport& world = m.world();
  DT_CHECK(world.size() == static_cast<int>(survivors.size()), "the survivors' world has ", world.size(),
           " processes, ", survivors.size(), " survivors named");
  if (copies.empty()) m.drop_copies();
  check_held_copies(m, copies, world.rank());
  auto next = std::make_unique<vps::Layout>(m.make_layout(to));
  const plan::Planner planner = in_place_recovery_planner(m, *next, survivors, world_before, copies);
  if (const auto lost = planner.unheld(); !lost.empty()) {
    std::string boxes;
    for (const auto& b : lost) boxes += (boxes.empty() ? "" : ", ") + b;
    DT_INPUT_ERROR("no surviving process holds ", boxes, lost.size() == 4 ? " (and maybe more)" : "", " of ",
                   m.layout().config().str(), ": the lost processes held the only copy; resume from a checkpoint");
  }
  ElasticOutcome out;
  out.world_before = world_before;
  out.world_after = to.world_size();
  // Copies keep no grads: with copies the grads come back zeroed (the interrupted step is done again).
  const std::uint32_t zeroed = copies.empty() ? 0 : exec::kStepBoundaryKinds;
  out.stats = m.move_state(std::move(next), world.rank(), planner.plan_rank(world.rank()), world, t0, zeroed, true);
  return out;
}

ElasticOutcome finish_join(Manager& m) {
  DT_CHECK(m.elastic() != nullptr, "finish_join() on a manager that did not join");
  edm::DeviceManager& dm = m.elastic()->edm();
  dm.prepare_joined(vps::ParallelConfig::parse(dm.joined_next()), [](const edm::Prepared&) {});
  return commit(m, dm.wait_prepared(), {}, {}, Clock::now(), /*joined=*/true);
}

}  // namespace dynatrain::python
