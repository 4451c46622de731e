// Redundancy 2 for the trainer: a copy of each rank's state kept in the memory of a process on
// another node (edm/copy_holders.h: node k's ranks by node k+1's), so that the survivors of a
// lost node rebuild its ranks' state from memory (Trainer::recover). The copies hold the moved
// kinds (grads are zero at a step boundary) less those a rank on another node holds the same of
// (a dp replica there). Invariants: the copies belong to the current layout (any commit releases
// them or, in a recovery, hands them to the engine); `copies.step` is the step whose state every
// held copy has, -1 while none is complete (set only once every message of a refresh arrived).
#include <algorithm>
#include <array>
#include <cstring>

#include "common/error.h"
#include "edm/copy_holders.h"
#include "train/trainer_impl.h"

namespace dynatrain::train {

namespace {

constexpr int kTagCopy = 105;  // beside the trainer's other point-to-point tags (trainer_impl.h)

bool kept(const vps::LocalBuffer& b, std::uint32_t absent) {
  return b.numel > 0 && (absent & vps::kind_bit(b.kind)) == 0;
}

}  // namespace

// Who keeps whose copy in the current layout, and blocks for the copies this rank keeps.
void Trainer::Impl::hold_copies(const std::vector<std::string>& node_of_process) {
  release_copies();
  comm::Transport& w = world();
  DT_CHECK(static_cast<int>(node_of_process.size()) == w.size(), node_of_process.size(), " nodes named for a world of ",
           w.size(), " processes");
  const int ranks = cfg().world_size();
  copies.process_of_rank.assign(static_cast<std::size_t>(ranks), -1);
  int process = 0;
  for (const auto& [rank] : comm::all_gather_values(w, std::array<std::int64_t, 1>{layout_rank})) {
    if (rank < ranks) copies.process_of_rank[static_cast<std::size_t>(rank)] = process;
    ++process;
  }
  std::vector<std::string> node_of_rank;
  for (int proc : copies.process_of_rank) {
    DT_CHECK(proc >= 0, "a rank of ", cfg().str(), " is held by no process");
    node_of_rank.push_back(node_of_process[static_cast<std::size_t>(proc)]);
  }
  std::vector<int> holders = edm::copy_holders(node_of_rank);  // InputError: every rank on one node
  const auto moved = make_layout(cfg(), kMovedKinds);
  copies.own = moved->rank_layout(layout_rank);
  copies.absent.clear();
  for (int r = 0; r < ranks; ++r) copies.absent.push_back(edm::kinds_held_on_other_nodes(*moved, r, node_of_rank));
  for (int r : edm::copies_kept_by(holders, layout_rank)) {
    HeldCopy c{r, copies.absent[static_cast<std::size_t>(r)], moved->rank_layout(r), {}};
    for (const auto& b : c.layout.buffers) {
      std::byte* block = nullptr;
      if (kept(b, c.absent)) {
        block = pool.allocate(arenas.block_bytes(b));
        std::memset(block, 0, arenas.block_bytes(b));
      }
      c.buffers.push_back(block);
    }
    copies.held.push_back(std::move(c));
  }
  copies.holders = std::move(holders);  // (last: copies.on())
}

void Trainer::Impl::release_copies() {
  for (HeldCopy& c : copies.held)
    for (std::size_t i = 0; i < c.buffers.size(); ++i)
      if (c.buffers[i] != nullptr) pool.release(c.buffers[i], arenas.block_bytes(c.layout.buffers[i]));
  copies = Copies{};
}

// A recovery's extra sources: every held copy whose holder survived (`held`: the old layout's
// rank of each survivor process), numbered by survivor process; ascending rank, as held.
std::vector<plan::SwitchPlacement::Copy> Trainer::Impl::copy_sources(const std::vector<int>& held) const {
  std::vector<plan::SwitchPlacement::Copy> out;
  for (int r = 0; r < static_cast<int>(copies.holders.size()); ++r) {
    const auto at = std::find(held.begin(), held.end(), copies.holders[static_cast<std::size_t>(r)]);
    if (at != held.end())
      out.push_back({r, static_cast<int>(at - held.begin()), copies.absent[static_cast<std::size_t>(r)]});
  }
  return out;
}

void Trainer::refresh_copies(const std::vector<std::string>& node_of_process) {
  Impl& im = *impl_;
  DT_CHECK(im.layout_rank < im.cfg().world_size() && im.world().size() == im.cfg().world_size(),
           "refresh_copies() with processes outside the layout");
  if (!im.copies.on()) im.hold_copies(node_of_process);
  im.copies.step = -1;  // until every message of this refresh arrived
  comm::Transport& w = im.world();
  std::vector<std::unique_ptr<comm::Request>> pending;
  for (Impl::HeldCopy& c : im.copies.held)
    for (std::size_t i = 0; i < c.buffers.size(); ++i)
      if (c.buffers[i] != nullptr)
        pending.push_back(w.irecv(c.buffers[i], im.arenas.block_bytes(c.layout.buffers[i]),
                                  im.copies.process_of_rank[static_cast<std::size_t>(c.rank)], kTagCopy));
  const auto me = static_cast<std::size_t>(im.layout_rank);
  const int holder = im.copies.process_of_rank[static_cast<std::size_t>(im.copies.holders[me])];
  for (const auto& b : im.copies.own.buffers)
    if (kept(b, im.copies.absent[me]))
      pending.push_back(w.isend(im.arenas.bytes(b), im.arenas.block_bytes(b), holder, kTagCopy));
  for (auto& r : pending) r->wait();
  im.copies.step = im.step;
}

std::size_t Trainer::copy_bytes() const {
  std::size_t total = 0;
  for (const Impl::HeldCopy& c : impl_->copies.held)
    for (std::size_t i = 0; i < c.buffers.size(); ++i)
      if (c.buffers[i] != nullptr) total += impl_->arenas.block_bytes(c.layout.buffers[i]);
  return total;
}

}  // namespace dynatrain::train
