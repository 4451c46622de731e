#include "ckpt/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "ckpt/checksum_avx2.h"
#include "common/error.h"

namespace dynatrain::ckpt {

File File::create(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) DT_INPUT_ERROR("cannot create '", path, "': ", std::strerror(errno));
  return File(fd, path);
}

File File::open_over(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // RDWR: mappable
  if (fd < 0) DT_INPUT_ERROR("cannot create '", path, "': ", std::strerror(errno));
  return File(fd, path);
}

namespace {

// A checkpoint file opened for reading is a regular file: a FIFO (or a device) put in its place
// would block the open or the reads for ever. Opened O_NONBLOCK, checked, then made blocking.
int open_regular(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "not a regular file";
    DT_INPUT_ERROR("checkpoint file '", path, "' is ", kind, ", not a regular file written by a save");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

File File::open_read(const std::string& path) {
  const int fd = open_regular(path, O_RDONLY);
  if (fd < 0) DT_INPUT_ERROR("cannot open checkpoint file '", path, "': ", std::strerror(errno));
  return File(fd, path);
}

std::optional<File> File::open_read_direct(const std::string& path) {
  const int fd = open_regular(path, O_RDONLY | O_DIRECT);
  if (fd < 0 && errno == EINVAL) return std::nullopt;
  if (fd < 0) DT_INPUT_ERROR("cannot open checkpoint file '", path, "': ", std::strerror(errno));
  return File(fd, path);
}

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) DT_INPUT_ERROR("cannot stat '", path_, "': ", std::strerror(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

void File::sync() const {
  if (::fsync(fd_) != 0) DT_INPUT_ERROR("fsync of '", path_, "' failed: ", std::strerror(errno));
}

void File::truncate(std::uint64_t bytes) const {
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
    DT_INPUT_ERROR("cannot cut '", path_, "' to ", bytes, " bytes: ", std::strerror(errno));
}

void advise_will_need(int fd, std::uint64_t offset, std::uint64_t bytes) {
  if (bytes > 0) ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes), POSIX_FADV_WILLNEED);
}

void read_exact(int fd, void* buf, std::size_t bytes, std::uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) DT_INPUT_ERROR("cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) DT_INPUT_ERROR("checkpoint file '", path, "' ends at byte ", offset, ": truncated");
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

int read_scattered(int fd, const std::vector<ByteSpan>& spans, std::uint64_t offset, const std::string& path) {
  std::vector<iovec> iov;
  iov.reserve(spans.size());
  for (const auto& s : spans)
    if (s.bytes > 0) iov.push_back({s.data, s.bytes});
  int calls = 0;
  for (std::size_t i = 0; i < iov.size();) {
    const int count = static_cast<int>(std::min<std::size_t>(IOV_MAX, iov.size() - i));
    ssize_t n = ::preadv(fd, &iov[i], count, static_cast<off_t>(offset));
    ++calls;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) DT_INPUT_ERROR("cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) DT_INPUT_ERROR("checkpoint file '", path, "' ends at byte ", offset, ": truncated");
    offset += static_cast<std::uint64_t>(n);
    for (; n > 0 && i < iov.size(); ++i) {  // skip what was read; resume inside a partly read span
      if (static_cast<std::size_t>(n) < iov[i].iov_len) {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + n;
        iov[i].iov_len -= static_cast<std::size_t>(n);
        break;
      }
      n -= static_cast<ssize_t>(iov[i].iov_len);
    }
  }
  return calls;
}

void write_exact(int fd, const void* buf, std::size_t bytes, std::uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const char*>(buf);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) DT_INPUT_ERROR("cannot write '", path, "': ", std::strerror(errno));
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) DT_INPUT_ERROR("cannot open directory '", dir, "': ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) DT_INPUT_ERROR("fsync of directory '", dir, "' failed: ", std::strerror(err));
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    File f = File::create(tmp);
    write_exact(f.fd(), content.data(), content.size(), 0, tmp);
    f.sync();
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    DT_INPUT_ERROR("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
  sync_dir(std::filesystem::path(path).parent_path().string());
}

std::string read_small_file(const std::string& path, std::uint64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) DT_INPUT_ERROR("'", path, "' is missing or not a regular file");
  File f = File::open_read(path);
  const std::uint64_t n = f.size();
  if (n > max_bytes) DT_INPUT_ERROR("'", path, "' has ", n, " bytes; at most ", max_bytes, " expected");
  std::string out(n, '\0');
  read_exact(f.fd(), out.data(), n, 0, path);
  return out;
}

namespace {

#ifdef DT_XXH3_AVX2
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

std::uint64_t checksum(const void* data, std::size_t bytes) {
#ifdef DT_XXH3_AVX2
  if (cpu_has_avx2()) return detail::xxh3_avx2(data, bytes);
#endif
  return XXH3_64bits(data, bytes);
}

std::uint64_t checksum_of_parts(const std::vector<ByteRun>& parts) {
#ifdef DT_XXH3_AVX2
  if (cpu_has_avx2()) {
    std::vector<detail::Run> runs;
    runs.reserve(parts.size());
    for (const auto& p : parts) runs.push_back({p.data, p.bytes});
    return detail::xxh3_runs_avx2(runs.data(), runs.size());
  }
#endif
  const std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(), XXH3_freeState);
  DT_CHECK(state != nullptr, "out of memory for a checksum state");
  XXH3_64bits_reset(state.get());
  for (const auto& p : parts) XXH3_64bits_update(state.get(), p.data, p.bytes);
  return XXH3_64bits_digest(state.get());
}

AlignedBuffer::AlignedBuffer(std::size_t bytes)
    : data_(static_cast<std::byte*>(std::aligned_alloc(
          kDirectAlignBytes, (bytes + kDirectAlignBytes - 1) / kDirectAlignBytes * kDirectAlignBytes))),
      bytes_(bytes) {
  DT_CHECK(data_ != nullptr || bytes == 0, "out of memory for a ", bytes, "-byte read buffer");
}

void AlignedBuffer::Free::operator()(std::byte* p) const { std::free(p); }

void populate(const std::vector<ByteSpan>& spans) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const auto& s : spans) {
    if (s.bytes == 0) continue;
    const auto first = reinterpret_cast<std::uintptr_t>(s.data) / page * page;
    const auto end = reinterpret_cast<std::uintptr_t>(s.data) + s.bytes;
    ::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_WRITE);
  }
}

std::string hex64(std::uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

}  // namespace dynatrain::ckpt
