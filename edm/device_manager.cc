#include "edm/device_manager.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/error.h"
#include "common/clock.h"
#include "edm/join_message.h"
#include "edm/switch_decision.h"

namespace dynatrain::edm {

using comm::broadcast_string;

namespace {

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// The join handshake (edm/join_message.h) rank 0 sends the processes a grow starts.
std::string join_message(const vps::ParallelConfig& current, const vps::ParallelConfig& next, ProcessId next_id,
                         const std::vector<ProcessId>& ids, const std::string& payload) {
  return serialize(JoinMessage{current.str(), next.str(), next_id, ids, payload});
}

// No placement, or rank r on process r.
bool is_identity(const std::vector<int>& placed) {
  for (int r = 0; r < static_cast<int>(placed.size()); ++r)
    if (placed[r] != r) return false;
  return true;
}

}  // namespace

DeviceManager::DeviceManager(comm::Transport& world, std::shared_ptr<Launcher> launcher, bool layout_groups)
    : world_(&world), launcher_(std::move(launcher)), layout_groups_(layout_groups) {
  control_ = world.split(0, world.rank());
  for (int r = 0; r < world.size(); ++r) ids_.push_back(static_cast<ProcessId>(r));
  next_id_ = static_cast<ProcessId>(world.size());
  // The caller owns this world (no-op deleter); the cache only hands it back.
  remember_world(ids_, std::shared_ptr<comm::Transport>(&world, [](comm::Transport*) {}), control_);
}

void DeviceManager::remember_world(const std::vector<ProcessId>& order, std::shared_ptr<comm::Transport> world,
                                   std::shared_ptr<comm::Transport> control) {
  worlds_[order] = World{std::move(world), std::move(control)};
}

DeviceManager::DeviceManager(std::unique_ptr<comm::Transport> joined, std::shared_ptr<Launcher> launcher,
                             bool layout_groups)
    : launcher_(std::move(launcher)), layout_groups_(layout_groups) {
  owned_world_ = std::move(joined);
  world_ = owned_world_.get();
  std::string msg;
  broadcast_string(*world_, msg);
  JoinMessage m = parse_join_message(msg);
  joined_current_ = std::move(m.current);
  joined_next_ = std::move(m.next);
  next_id_ = m.next_id;
  ids_ = std::move(m.ids);
  joined_payload_ = std::move(m.payload);
  DT_CHECK(static_cast<int>(ids_.size()) == world_->size(), "join message names ", ids_.size(),
           " processes for a world of ", world_->size());
  control_ = world_->split(0, world_->rank());
  // Remembered once prepare_joined() knows it stays the world (as the starters do).
}

DeviceManager::~DeviceManager() {
  if (thread_.joinable()) thread_.join();
}

void DeviceManager::wake_from(comm::Transport& world, int first, Wake what) {
  if (world.rank() != 0) return;
  char token = 1;
  std::vector<std::unique_ptr<comm::Request>> reqs;
  for (int r = std::max(first, 1); r < world.size(); ++r)
    reqs.push_back(world.isend(&token, 1, r, static_cast<int>(what)));
  comm::wait_all(reqs);
}

void DeviceManager::wait_for_root(comm::Transport& world, Wake what) {
  char token = 0;
  auto req = world.irecv(&token, 1, 0, static_cast<int>(what));
  while (!req->test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void DeviceManager::prepare(const vps::ParallelConfig& current, const vps::ParallelConfig& next, Work work,
                            std::string payload, Place place, std::vector<int> vacate, bool keep) {
  DT_CHECK(!preparing(), "prepare() while another prepare is in flight");
  prepared_ = std::make_unique<Prepared>();
  error_ = nullptr;
  thread_ = std::thread([this, current, next, work = std::move(work), payload = std::move(payload),
                         place = std::move(place), vacate = std::move(vacate), keep]() mutable {
    try {
      run_prepare(current, next, std::move(work), payload, place, vacate, keep);
    } catch (...) {
      error_ = std::current_exception();
    }
    starting_ = 0;
    prepare_end_ = now_s();
  });
}

// Rank 0's decision on a prepare (edm/switch_decision.h), the same on every rank (collective
// over `ctl`): refused, shrink the world, or keep it (its `why`: why nobody leaves), and whether
// processes a placement leaves out may leave.
SwitchDecision DeviceManager::decide_prepare(comm::Transport& ctl, int need, const std::vector<int>& vacate,
                                             bool keep) const {
  std::string wire;
  if (ctl.rank() == 0) wire = serialize(decide_switch(need, ctl.size(), vacate, launcher_.get(), ctl.backend(), keep));
  broadcast_string(ctl, wire);
  return parse_switch_decision(wire);
}

// Starts `need` processes and merges them into grown_world_ (with grown_control_), then tells
// them the job's state, the placement and whether leftovers leave. False when the launcher
// refuses (on every rank alike; nothing changed, Prepared::refused says why).
bool DeviceManager::grow_world(const vps::ParallelConfig& current, const vps::ParallelConfig& next, int need,
                               const std::string& payload, SwitchDecision decision) {
  Prepared& p = *prepared_;
  const double t0 = now_s();
  starting_ = need;
  try {
    grown_world_ = launcher_->grow(*control_, need);
  } catch (const LaunchRefused& e) {  // every rank alike: the switch is refused, nothing changed
    p.refused = e.what();
    return false;
  }
  p.creations += 1;
  for (int i = 0; i < need; ++i) next_ids_.push_back(next_next_id_++);
  std::string msg = join_message(current, next, next_next_id_, next_ids_, payload);
  broadcast_string(*grown_world_, msg);
  grown_control_ = grown_world_->split(0, grown_world_->rank());
  p.creations += 1;
  p.spawn_seconds = now_s() - t0;
  // The decision with its placement, for the new processes (they cannot compute it).
  std::string wire = serialize(decision);
  broadcast_string(*grown_control_, wire);
  starting_ = 0;  // the new processes have joined and know the placement
  return true;
}

// The next world under an identity placement: the grown one, the lowest ranks of the current
// one (`shrink`; the others leave), or the current one kept as it is.
void DeviceManager::settle_identity_world(const vps::ParallelConfig& next, int need, bool shrink) {
  Prepared& p = *prepared_;
  comm::Transport& ctl = *control_;
  if (need > 0) {
    next_world_ = std::move(grown_world_);
    next_control_ = std::move(grown_control_);
    remember_world(next_ids_, next_world_, next_control_);
  } else if (shrink) {
    const bool stays = ctl.rank() < next.world_size();
    next_world_ = ctl.split(stays ? 0 : -1, ctl.rank());
    p.creations += 1;
    next_ids_.resize(next.world_size());
    if (stays) {
      next_control_ = next_world_->split(0, next_world_->rank());
      p.creations += 1;
      remember_world(next_ids_, next_world_, next_control_);
    } else {
      p.leaving = true;
    }
  }
}

void DeviceManager::run_prepare(vps::ParallelConfig current, vps::ParallelConfig next, Work work,
                                const std::string& payload, const Place& place, const std::vector<int>& vacate,
                                bool keep) {
  comm::Transport& ctl = *control_;
  if (ctl.rank() >= current.world_size())
    wait_for_root(ctl, Wake::kPrepare);
  else
    wake_from(ctl, current.world_size(), Wake::kPrepare);
  prepare_start_ = now_s();
  Prepared& p = *prepared_;
  p.config = next;
  p.world_before = p.world_after = ctl.size();
  // Processes to start: what the layout lacks once the vacated ones are gone.
  const int need = next.world_size() - (ctl.size() - static_cast<int>(vacate.size()));
  SwitchDecision decision = decide_prepare(ctl, need, vacate, keep);
  if (decision.refused()) {
    p.refused = decision.why;
    return;
  }
  if (decision.kind == SwitchDecision::Kind::kKeep && !decision.why.empty())
    p.note = "processes outside " + next.str() + " stay, idle: " + decision.why;
  next_ids_ = ids_;
  next_next_id_ = next_id_;
  const std::vector<int> placed = place ? place(ctl.size() + std::max(need, 0)) : std::vector<int>{};
  const bool identity = is_identity(placed);
  for (int v : vacate) {
    const bool placed_on_v =
        identity ? v < next.world_size() : std::find(placed.begin(), placed.end(), v) != placed.end();
    DT_CHECK(!placed_on_v, "placement gives a rank to vacated process ", v);
  }
  // The merged world; with a placement it is reordered below.
  decision.placement = placed;
  if (need > 0 && !grow_world(current, next, need, payload, decision)) return;
  if (!identity) {
    p.process_of_rank = placed;
    reorder(next, placed, decision.may_leave);
  } else {
    settle_identity_world(next, need, decision.kind == SwitchDecision::Kind::kShrink);
  }
  after_grow(next, work);
}

// The next world ordered by placement: the process of rank r becomes rank r; processes that
// take no rank leave when they may (else they follow, idle, in their order). Collective over
// the transition world.
void DeviceManager::reorder(const vps::ParallelConfig& next, const std::vector<int>& process_of_rank, bool may_leave) {
  Prepared& p = *prepared_;
  comm::Transport& tc = grown_control_ ? *grown_control_ : *control_;
  const int me = tc.rank(), ranks = next.world_size();
  const auto it = std::find(process_of_rank.begin(), process_of_rank.end(), me);
  const bool takes = it != process_of_rank.end();
  const bool member = takes || !may_leave;
  const int key = takes ? static_cast<int>(it - process_of_rank.begin()) : ranks + me;
  std::vector<ProcessId> all = next_ids_;  // transition world ids, by transition rank
  next_ids_.clear();
  for (int r = 0; r < ranks; ++r) next_ids_.push_back(all[process_of_rank[r]]);
  if (!may_leave)
    for (int q = 0; q < tc.size(); ++q)
      if (std::find(process_of_rank.begin(), process_of_rank.end(), q) == process_of_rank.end())
        next_ids_.push_back(all[q]);
  p.leaving = !member;
  // A world of these processes in this order seen before: no split (rank 0 decides; every
  // member of that world holds it, since it was made with all of them and none has left).
  const auto cached = worlds_.find(next_ids_);
  char hit = cached != worlds_.end() ? 1 : 0;
  tc.broadcast(&hit, 1, 0);
  if (hit) {
    if (!member) return;
    DT_CHECK(cached != worlds_.end(), "process ", all[me], " lacks the cached world that rank 0 holds");
    next_world_ = cached->second.world;
    next_control_ = cached->second.control;
    return;
  }
  next_world_ = tc.split(member ? 0 : -1, key);
  p.creations += 1;
  if (!member) return;
  next_control_ = next_world_->split(0, next_world_->rank());
  p.creations += 1;
  remember_world(next_ids_, next_world_, next_control_);
}

void DeviceManager::after_grow(const vps::ParallelConfig& next, Work& work) {
  Prepared& p = *prepared_;
  if (!p.leaving) {
    comm::Transport& nc = next_control_ ? *next_control_ : *control_;
    p.world_after = nc.size();
    if (layout_groups_) {
      const std::uint64_t before = cache_.creations();
      p.comms = cache_.get(nc, next_ids_, next);
      p.creations += cache_.creations() - before;
    }
  } else {
    p.world_after = next.world_size();
  }
  work(p);
}

void DeviceManager::prepare_joined(const vps::ParallelConfig& next, Work work) {
  DT_CHECK(!preparing(), "prepare_joined() while another prepare is in flight");
  prepared_ = std::make_unique<Prepared>();
  prepare_start_ = now_s();
  prepared_->config = next;
  prepared_->world_before = prepared_->world_after = world_->size();
  next_ids_ = ids_;
  next_next_id_ = next_id_;
  std::string wire;
  broadcast_string(*control_, wire);  // the starters' decision with its placement ([]: identity)
  const SwitchDecision decision = parse_switch_decision(wire);
  if (!is_identity(decision.placement)) {
    prepared_->process_of_rank = decision.placement;
    reorder(next, decision.placement, decision.may_leave);
  } else {
    remember_world(ids_, owned_world_, control_);
  }
  after_grow(next, work);
  prepare_end_ = now_s();
}

Prepared& DeviceManager::wait_prepared() {
  DT_CHECK(prepared_ != nullptr, "wait_prepared() without prepare()");
  const double called = now_s();
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  Prepared& p = *prepared_;
  p.seconds = prepare_end_ - prepare_start_;
  p.hidden_seconds = std::max(0.0, std::min(prepare_end_, called) - prepare_start_);
  return p;
}

comm::Transport& DeviceManager::transition_world() {
  DT_CHECK(prepared_ != nullptr, "transition_world() without prepare()");
  // Grow: the merged world (its control). Shrink or same size: the current world.
  if (grown_control_) return *grown_control_;
  if (next_world_ && next_world_->size() > world_->size()) return *next_control_;
  return *control_;
}

void DeviceManager::adopt() {
  DT_CHECK(prepared_ != nullptr && !thread_.joinable(), "adopt() before wait_prepared()");
  Prepared& p = *prepared_;
  if (p.leaving) {
    left_ = true;
    cache_ = CommunicatorCache{};
    worlds_.clear();
  } else if (next_world_) {
    for (ProcessId id : ids_)
      if (std::find(next_ids_.begin(), next_ids_.end(), id) == next_ids_.end()) {
        cache_.drop_member(id);
        std::erase_if(worlds_,
                      [id](const auto& w) { return std::find(w.first.begin(), w.first.end(), id) != w.first.end(); });
      }
    control_ = std::move(next_control_);
    owned_world_ = std::move(next_world_);
    world_ = owned_world_.get();
    ids_ = next_ids_;
    next_id_ = next_next_id_;
  }
  next_world_.reset();
  next_control_.reset();
  grown_world_.reset();
  grown_control_.reset();
  prepared_.reset();
}

void DeviceManager::discard() {
  if (thread_.joinable()) thread_.join();
  next_world_.reset();
  next_control_.reset();
  grown_world_.reset();
  grown_control_.reset();
  prepared_.reset();
  error_ = nullptr;
}

}  // namespace dynatrain::edm
