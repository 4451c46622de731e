#include "job/memory_copy.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/file_io.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/error.h"
#include "job/job_status.h"
#include "job/memory_check.h"
#include "job/memory_copy_files.h"
#include "job/train_ckpt.h"

namespace dynatrain::job {

namespace fs = std::filesystem;

namespace {

constexpr int kTagBuddy = 211;
constexpr std::size_t kBuddyChunk = std::size_t{64} << 20;  // bytes a sendrecv: the MPI count stays an int

// A file of the copy mapped whole (read-only, or writable after it was cut to its length).
class Mapping {
 public:
  Mapping(const ckpt::File& f, std::uint64_t bytes, bool writable) : bytes_(bytes) {
    if (bytes_ == 0) return;
    // MAP_POPULATE: the page tables in one call, not a fault a page during the transfer.
    void* p =
        mmap(nullptr, bytes_, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED | MAP_POPULATE, f.fd(), 0);
    if (p == MAP_FAILED) DT_INPUT_ERROR("cannot map '", f.path(), "' (", bytes_, " bytes) of the memory copy");
    data_ = static_cast<std::byte*>(p);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_) munmap(data_, bytes_);
  }
  std::byte* data() const { return data_; }

 private:
  std::byte* data_ = nullptr;
  std::uint64_t bytes_ = 0;
};

// Rank 0: the step directory of this copy (the older one renamed), holding only the files of
// ranks below `ranks` (a restarted job has fewer ranks than the one that wrote the directory).
void begin_copy(const std::string& dir, std::int64_t step, int ranks, int redundancy) {
  const std::string step_dir = ckpt::recycle_save(dir, step);
  std::set<std::string> keep;
  for (int r = 0; r < ranks; ++r) {
    keep.insert(ckpt::rank_file_name(r));
    if (redundancy >= 2) keep.insert(ckpt::copy_file_name(r));
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(step_dir, ec))
    if (!keep.count(entry.path().filename().string())) fs::remove_all(entry.path(), ec);
}

// The rank `stride` ranks on: on another node when the job spans nodes placed by blocks.
int buddy_stride(comm::Transport& world, int ranks) {
  int on_first_node = 0;
  for (int r = 0; r < ranks; ++r) on_first_node += world.node_of(r) == world.node_of(0);
  return on_first_node < ranks ? on_first_node : 1;
}

// Every rank r of `ranks`: sends its rank file to rank (r + stride) mod ranks and keeps the
// file of rank (r - stride) mod ranks as its copy, straight between the files' mappings.
std::string exchange_with_buddies(const std::string& step_dir, comm::Transport& world, int ranks) {
  const int r = world.rank(), stride = buddy_stride(world, ranks);
  const int buddy = (r + stride) % ranks, from = (r - stride + ranks) % ranks;
  const ckpt::File mine = ckpt::File::open_read((fs::path(step_dir) / ckpt::rank_file_name(r)).string());
  std::uint64_t send_bytes = mine.size(), recv_bytes = 0;
  world.sendrecv(&send_bytes, sizeof send_bytes, buddy, &recv_bytes, sizeof recv_bytes, from, kTagBuddy);
  const std::string name = ckpt::copy_file_name(from);
  const ckpt::File copy = ckpt::File::open_over((fs::path(step_dir) / name).string());
  copy.truncate(recv_bytes);
  const Mapping src(mine, send_bytes, false), dst(copy, recv_bytes, true);
  for (std::uint64_t at = 0; at < std::max(send_bytes, recv_bytes); at += kBuddyChunk) {
    const std::uint64_t out = at < send_bytes ? std::min<std::uint64_t>(kBuddyChunk, send_bytes - at) : 0;
    const std::uint64_t in = at < recv_bytes ? std::min<std::uint64_t>(kBuddyChunk, recv_bytes - at) : 0;
    world.sendrecv(out ? src.data() + at : nullptr, out, buddy, in ? dst.data() + at : nullptr, in, from, kTagBuddy);
  }
  return name;
}

std::uint64_t file_bytes_of(const std::string& step_dir, int ranks) {
  std::uint64_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    std::error_code ec;
    total += fs::file_size(fs::path(step_dir) / ckpt::rank_file_name(r), ec);
  }
  return total;
}

}  // namespace

const std::vector<vps::StateKind>& copied_kinds() {
  static const std::vector<vps::StateKind> kinds = vps::parse_state_kinds("master,exp_avg,exp_avg_sq");
  return kinds;
}

std::string memory_copy_dir() {
  const char* dir = std::getenv(kMemoryCopyDirEnv);
  return dir ? dir : "";
}

std::uint64_t copied_state_bytes(const vps::Layout& layout) {
  unsigned mask = 0;
  for (vps::StateKind k : copied_kinds()) mask |= 1u << static_cast<int>(k);
  std::uint64_t total = 0;
  for (int r = 0; r < layout.config().world_size(); ++r)
    layout.visit_buffers(
        r,
        [&](const vps::LocalBuffer& b, const std::vector<vps::Segment>&) {
          total += static_cast<std::uint64_t>(b.numel) * layout.options().elem_bytes[static_cast<int>(b.kind)];
        },
        mask);
  return total;
}

std::string memory_copy_problem(int redundancy, const comm::Transport& world) {
  const std::string dir = memory_copy_dir();
  const char* supervisor = std::getenv(kSupervisorPidEnv);  // the copy's owner, which removes it
  if (dir.empty() || !supervisor || kill(static_cast<pid_t>(std::atol(supervisor)), 0) != 0)
    return detail::concat("--redundancy ", redundancy, " keeps the state's copy for a restart, which the supervisor ",
                          "makes: start the job as `dynatrain train --np N --max-restarts K ...` (without mpirun)");
  for (int r = 1; r < world.size(); ++r)
    if (world.node_of(r) != world.node_of(0))
      return detail::concat("--redundancy ", redundancy, " needs the job's processes on one node; rank ", r,
                            " is on another node than rank 0");
  return "";
}

namespace {

// The bytes DIR's files hold (allocated blocks): the copies a restarted job writes over in place.
std::uint64_t bytes_held(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st = {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      total += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

}  // namespace

std::string memory_copy_room_problem(int redundancy, std::uint64_t state_bytes) {
  const std::string dir = memory_copy_dir();
  struct statvfs fs_info = {};
  if (statvfs(dir.c_str(), &fs_info) != 0)
    return detail::concat("the memory copy's directory '", dir, "' cannot be read");
  // tmpfs pages are memory: the file system's free space and the node's available memory both bound it.
  std::uint64_t room = static_cast<std::uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
  if (const std::uint64_t available = node_available_bytes(); available > 0) room = std::min(room, available);
  // A restarted job's copies reuse the pages of the copy it resumed from (written over in turn).
  room += bytes_held(dir);
  const std::uint64_t need = 2 * static_cast<std::uint64_t>(redundancy) * state_bytes;
  if (need > room)
    return detail::concat("--redundancy ", redundancy, " keeps 2 x ", redundancy, " copies of the state (",
                          format_bytes(static_cast<double>(state_bytes)), " each) in '", dir, "', which has room for ",
                          format_bytes(static_cast<double>(room)),
                          " (its free space, at most the memory available); use --redundancy 1 (one copy), or none");
  return "";
}

void save_memory_copy(const std::string& dir, std::int64_t step, train::Trainer& trainer, comm::Transport& world,
                      const nlohmann::json& run, int redundancy, MemoryCopyStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json state = saved_progress(trainer, step, run);
  const vps::Layout& layout = trainer.layout();
  const int ranks = layout.config().world_size();
  const bool in_layout = world.rank() < ranks;
  const std::string step_dir = (fs::path(dir) / ckpt::step_dir_name(step)).string();
  try {
    ckpt::on_all_ranks(world, "memory copy", [&] {
      if (world.rank() == 0) begin_copy(dir, step, ranks, redundancy);
    });
    std::set<std::string> names;
    ckpt::on_all_ranks(world, "memory copy", [&] {
      if (!in_layout) return;
      ckpt::write_rank_file(step_dir, layout, world.rank(), copied_kinds(), view(trainer.arenas()),
                            ckpt::kChecksumChunkBytes, ckpt::FileWrite::kOver);
      names.insert(ckpt::rank_file_name(world.rank()));
    });
    if (redundancy >= 2 && ranks > 1)
      ckpt::on_all_ranks(world, "memory copy", [&] {
        if (in_layout) names.insert(exchange_with_buddies(step_dir, world, ranks));
      });
    note_memory_copy_files(std::move(names));
    ckpt::on_all_ranks(world, "memory copy", [&] {
      if (world.rank() == 0) ckpt::commit(dir, step, layout, copied_kinds(), state);
    });
  } catch (const InputError& e) {  // every rank alike (on_all_ranks)
    if (world.rank() == 0) {
      std::printf("memory copy of step %lld abandoned: %s; training goes on\n", static_cast<long long>(step), e.what());
      std::fflush(stdout);
    }
    return;
  }
  const double s = seconds_since(t0);
  if (stats.copies < 2) {
    stats.first_seconds[stats.copies] = s;
  } else {
    stats.warm_seconds += s;
    stats.warm_max_seconds = std::max(stats.warm_max_seconds, s);
  }
  ++stats.copies;
  if (world.rank() == 0) stats.file_bytes = file_bytes_of(step_dir, ranks);
}

}  // namespace dynatrain::job
