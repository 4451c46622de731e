#include "python/elastic.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <sstream>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
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
  const int new_rank = placement.is_identity() ? (me < ranks ? me : -1) : placement.rank_of(me, ranks);
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
                                        int world_before) {
  const int n = static_cast<int>(survivors.size());
  if (world_before != m.layout().config().world_size())
    DT_INPUT_ERROR("recovery from ", world_before, " processes, but the layout ", m.layout().config().str(), " has ",
                   m.layout().config().world_size(), " ranks");
  if (next.config().world_size() > n)
    DT_INPUT_ERROR("a layout of ", next.config().world_size(), " ranks cannot run on the ", n, " surviving processes");
  std::vector<int> process_of(static_cast<std::size_t>(world_before), -1), lost;
  for (int i = 0; i < n; ++i) {
    const int r = survivors[static_cast<std::size_t>(i)];
    if (r < 0 || r >= world_before || process_of[static_cast<std::size_t>(r)] >= 0)
      DT_INPUT_ERROR("survivor rank ", r, ": valid are distinct ranks 0..", world_before - 1);
    process_of[static_cast<std::size_t>(r)] = i;
  }
  for (int r = 0, ghost = n; r < world_before; ++r)
    if (process_of[static_cast<std::size_t>(r)] < 0) {
      lost.push_back(ghost);
      process_of[static_cast<std::size_t>(r)] = ghost++;
    }
  return plan::Planner(m.layout(), next, m.options().topology, {plan::Placement(process_of), {}, lost});
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

std::string vacate_problem(const std::vector<int>& vacate, int world_size) {
  std::set<int> seen;
  for (int v : vacate) {
    if (v < 0 || v >= world_size)
      return "cannot vacate rank " + std::to_string(v) + ": valid ranks are 0.." + std::to_string(world_size - 1);
    if (!seen.insert(v).second) return "rank " + std::to_string(v) + " is named twice in vacate";
  }
  return {};
}

void prepare_processes(Manager& m, const ElasticRequest& r) {
  comm::Transport& world = m.world();
  if (m.elastic() && m.elastic()->edm().preparing()) DT_INPUT_ERROR("a switch is being prepared already");
  if (const std::string why = vacate_problem(r.vacate, world.size()); !why.empty()) DT_INPUT_ERROR(why);
  m.make_layout(r.to);  // a config the model cannot take: InputError before any communication
  if (!m.elastic()) m.set_elastic(std::make_shared<Elastic>(world, r.launch));
  const std::string refusal = world_change_refusal(world, m.elastic()->launcher(), r);
  if (!refusal.empty()) DT_INPUT_ERROR(refusal);
  edm::DeviceManager::Place place;
  if (!r.vacate.empty())
    place = [ranks = r.to.world_size(), vacate = r.vacate](int processes) {
      return plan::place_around(ranks, processes, vacate);
    };
  m.elastic()->edm().prepare(
      m.layout().config(), r.to, [](const edm::Prepared&) {}, r.payload, place, r.vacate);
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

std::vector<int> in_place_placement(int ranks, int world_size, const std::vector<int>& vacate) {
  if (const std::string why = vacate_problem(vacate, world_size); !why.empty()) DT_INPUT_ERROR(why);
  const int stay = world_size - static_cast<int>(vacate.size());
  if (ranks > stay)
    DT_INPUT_ERROR("a layout of ", ranks, " ranks needs ", ranks, " processes; ", stay, " of the world's ", world_size,
                   " stay, and this world cannot start processes");
  return plan::place_around(ranks, world_size, vacate);
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
  const int new_rank = placement.rank_of(me, to.world_size());
  out.stats = m.move_state(std::move(next), new_rank, plan, world, t0);
  out.left = new_rank < 0;
  m.set_world(nullptr);  // the old world has processes that leave: the caller gives the new one
  return out;
}

ElasticOutcome recover_in_place(Manager& m, const vps::ParallelConfig& to, const std::vector<int>& survivors,
                                int world_before) {
  const auto t0 = Clock::now();
  comm::Transport& world = m.world();
  DT_CHECK(world.size() == static_cast<int>(survivors.size()), "the survivors' world has ", world.size(),
           " processes, ", survivors.size(), " survivors named");
  auto next = std::make_unique<vps::Layout>(m.make_layout(to));
  const plan::Planner planner = in_place_recovery_planner(m, *next, survivors, world_before);
  if (const auto lost = planner.unheld(); !lost.empty()) {
    std::string boxes;
    for (const auto& b : lost) boxes += (boxes.empty() ? "" : ", ") + b;
    DT_INPUT_ERROR("no surviving process holds ", boxes, lost.size() == 4 ? " (and maybe more)" : "", " of ",
                   m.layout().config().str(), ": the lost processes held the only copy; resume from a checkpoint");
  }
  ElasticOutcome out;
  out.world_before = world_before;
  out.world_after = to.world_size();
  out.stats = m.move_state(std::move(next), world.rank(), planner.plan_rank(world.rank()), world, t0);
  return out;
}

ElasticOutcome finish_join(Manager& m) {
  DT_CHECK(m.elastic() != nullptr, "finish_join() on a manager that did not join");
  edm::DeviceManager& dm = m.elastic()->edm();
  dm.prepare_joined(vps::ParallelConfig::parse(dm.joined_next()), [](const edm::Prepared&) {});
  return commit(m, dm.wait_prepared(), {}, {}, Clock::now(), /*joined=*/true);
}

}  // namespace dynatrain::python
