// MpiSession (MPI's lifetime) and MpiTransport's construction: the three duplicates of the
// communicator (user point to point, collectives, runs protocol), the node map and the runs probe.
//
// Invariants:
//  * MpiSession::init is idempotent and serialised; it sets MPI_ERRORS_RETURN on MPI_COMM_WORLD
//    and MPI_COMM_SELF and refuses a thread level below MPI_THREAD_MULTIPLE.
//  * A transport owns its three communicators, each under MPI_ERRORS_RETURN; a failed
//    construction frees what it made; destruction after MPI_Finalize frees nothing.
//  * node_of_ and runs_direct_ hold the same answer on every rank (one all-gather, one
//    all-reduce at construction).
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "comm/mpi/mpi_error.h"
#include "comm/mpi/mpi_runs.h"
#include "comm/mpi/mpi_transport.h"
#include "common/error.h"

namespace dynatrain::comm {

using namespace mpi_detail;

namespace {

// Read by peers' probes: cross-memory attach works between two processes when one can read this.
constexpr std::uint64_t kCmaMagic = 0x44796e615472a1cbull;
volatile std::uint64_t cma_probe_word = kCmaMagic;

std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MpiSession

bool MpiSession::init(int* argc, char*** argv) {
  std::lock_guard lock(init_mutex());
  if (mpi_finalized()) throw CommError("mpi: MPI_Init_thread: MPI was already finalised");
  int initialized = 0;
  MPI_Initialized(&initialized);
  bool did_init = false;
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) throw_mpi(rc, "MPI_Init_thread(MPI_THREAD_MULTIPLE)");
    did_init = true;
  } else {
    DT_MPI(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  DT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(MPI_COMM_WORLD)");
  DT_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(MPI_COMM_SELF)");
  if (provided < MPI_THREAD_MULTIPLE) {
    throw CommError(concat("mpi: the MPI library provides thread level ", provided,
                           " but DynaTrain needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
                           "); use an MPI build with thread support"));
  }
  return did_init;
}

MpiSession::MpiSession(int* argc, char*** argv) : owner_(init(argc, argv)) {}

MpiSession::~MpiSession() {
  std::lock_guard lock(init_mutex());
  if (owner_ && !mpi_finalized()) MPI_Finalize();
}

// ---------------------------------------------------------------------------------------------
// MpiTransport

MpiTransport::MpiTransport(MPI_Comm comm, std::size_t max_chunk_bytes) : comm_(comm), max_chunk_(max_chunk_bytes) {
  try {
    DT_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    DT_MPI(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    DT_MPI(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    DT_MPI(MPI_Comm_dup(comm_, &coll_comm_), "rank ", rank_, ": MPI_Comm_dup (collectives)");
    DT_MPI(MPI_Comm_set_errhandler(coll_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    DT_MPI(MPI_Comm_dup(comm_, &runs_comm_), "rank ", rank_, ": MPI_Comm_dup (runs)");
    runs_progress_ = make_runs_progress();
    DT_MPI(MPI_Comm_set_errhandler(runs_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    probe_runs_direct();
  } catch (...) {
    if (runs_comm_ != MPI_COMM_NULL) MPI_Comm_free(&runs_comm_);
    if (coll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&coll_comm_);
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiTransport::~MpiTransport() {
  if (mpi_finalized()) return;
  if (runs_comm_ != MPI_COMM_NULL) MPI_Comm_free(&runs_comm_);
  if (coll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&coll_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Collective: runs go direct to the peers on this node (as Open MPI sees nodes:
// MPI_COMM_TYPE_SHARED, so ranks that an emulated cluster places on other hosts are not) when
// every rank could read every same-node peer's probe word with process_vm_readv, and the tags of
// the protocol fit MPI_TAG_UB; else every pair uses the packing default. It also records every
// rank's node (node_of: the lowest rank of its node). One split_type, one
// all-gather, one all-reduce.
void MpiTransport::probe_runs_direct() {
  struct Id {
    std::uint64_t pid = 0, word = 0, node = 0;
  };
  // This node's ranks, as ranks of this communicator.
  MPI_Comm node = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_split_type(coll_comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "rank ", rank_,
         ": MPI_Comm_split_type (runs probe)");
  MPI_Group node_group = MPI_GROUP_NULL, all_group = MPI_GROUP_NULL;
  int n = 0;
  MPI_Comm_group(node, &node_group);
  MPI_Comm_group(coll_comm_, &all_group);
  MPI_Group_size(node_group, &n);
  std::vector<int> local(static_cast<std::size_t>(n)), mine(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(node_group, n, local.data(), all_group, mine.data());
  MPI_Group_free(&node_group);
  MPI_Group_free(&all_group);
  MPI_Comm_free(&node);
  const Id me{static_cast<std::uint64_t>(getpid()), reinterpret_cast<std::uintptr_t>(&cma_probe_word),
              static_cast<std::uint64_t>(*std::min_element(mine.begin(), mine.end()))};
  std::vector<Id> all(static_cast<std::size_t>(size_));
  DT_MPI(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, coll_comm_), "rank ", rank_,
         ": MPI_Allgather (runs probe)");
  node_of_.clear();
  for (const Id& id : all) node_of_.push_back(static_cast<int>(id.node));
  // MPI_TAG_UB is a predefined attribute of MPI_COMM_WORLD only: Open MPI attaches it to a
  // duplicate (attributes are copied) but not to a split or merged communicator, where the
  // bound is the same (MPI 4.0, 7.1.2: the value is constant over the job).
  void* ub = nullptr;
  int has_ub = 0;
  DT_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub), "MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB)");
  int ok = has_ub && *static_cast<int*>(ub) >= kMaxProtocolTag;
  runs_direct_.assign(all.size(), 0);
  for (int r : mine) {
    if (!ok || r < 0 || r >= size_) continue;
    const Id& peer = all[static_cast<std::size_t>(r)];
    std::uint64_t word = 0;
    iovec into{&word, sizeof word}, from{reinterpret_cast<void*>(peer.word), sizeof word};
    ok = process_vm_readv(static_cast<pid_t>(peer.pid), &into, 1, &from, 1, 0) == static_cast<ssize_t>(sizeof word) &&
         word == kCmaMagic;
    runs_direct_[static_cast<std::size_t>(r)] = 1;
  }
  // Only when every rank of the communicator is on this node: then every pair of an engine
  // switch uses the runs protocol and every wait progresses the posted runs receives (a plain
  // MPI_Wait on an off-node message would not, and could close a cycle of waits).
  ok = ok && n == size_;
  int all_ok = 0;
  DT_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, coll_comm_), "rank ", rank_, ": MPI_Allreduce (runs probe)");
  if (!all_ok) runs_direct_.assign(all.size(), 0);
}

int MpiTransport::node_of(int rank) const {
  DT_CHECK(rank >= 0 && rank < size_, "node_of: rank ", rank, " of ", size_);
  return node_of_[static_cast<std::size_t>(rank)];
}

std::unique_ptr<MpiTransport> MpiTransport::world() { return from_comm(MPI_COMM_WORLD); }

std::unique_ptr<MpiTransport> MpiTransport::from_comm(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || mpi_finalized()) {
    throw CommError("mpi: MPI is not initialised; construct an MpiSession first");
  }
  MPI_Comm dup = MPI_COMM_NULL;
  DT_MPI(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::unique_ptr<MpiTransport>(new MpiTransport(dup, kDefaultMaxChunkBytes));
}

void MpiTransport::set_max_chunk_bytes(std::size_t bytes) {
  DT_CHECK(bytes >= 1 && bytes <= static_cast<std::size_t>(INT_MAX), "max chunk must be in [1, INT_MAX], got ", bytes);
  max_chunk_.store(bytes, std::memory_order_relaxed);
}

}  // namespace dynatrain::comm
