// Durable file I/O for checkpoints: whole reads and writes at offsets, fsync of files and
// directories, atomic replacement of small files, and the content checksum (XXH3-64).
// I/O failures are InputErrors naming the path (a checkpoint directory is user input); a short
// read is reported as truncation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dynatrain::ckpt {

// An open file descriptor, closed on destruction.
class File {
 public:
  static File create(const std::string& path);  // write-only, truncated, 0644
  // Read-write (a writable mapping needs it), created when missing (0644), NOT truncated: the bytes written over the old
  // ones reuse the pages the file system already holds (warm memory on tmpfs). Cut it to its
  // new length with truncate() once written.
  static File open_over(const std::string& path);
  static File open_read(const std::string& path);
  // Read-only with O_DIRECT (reads bypass the page cache); nullopt where the file system
  // refuses it (EINVAL: tmpfs on older kernels, some network file systems).
  static std::optional<File> open_read_direct(const std::string& path);
  File(File&& other) noexcept;
  File& operator=(File&&) = delete;
  ~File();
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  std::uint64_t size() const;
  void sync() const;                         // fsync; throws on failure
  void truncate(std::uint64_t bytes) const;  // ftruncate; throws on failure

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// Asks the kernel to start reading [offset, offset + bytes) into the page cache and returns at
// once (posix_fadvise WILLNEED); a hint: failures are ignored.
void advise_will_need(int fd, std::uint64_t offset, std::uint64_t bytes);
void read_exact(int fd, void* buf, std::size_t bytes, std::uint64_t offset, const std::string& path);
void write_exact(int fd, const void* buf, std::size_t bytes, std::uint64_t offset, const std::string& path);
// fsync of a directory, so that entries created or renamed in it are durable.
void sync_dir(const std::string& dir);
// Writes `content` to `path` durably and atomically: path.tmp, fsync, rename, fsync the directory.
void write_file_atomic(const std::string& path, const std::string& content);
std::string read_small_file(const std::string& path, std::uint64_t max_bytes);

std::uint64_t checksum(const void* data, std::size_t bytes);
// The checksum of `parts` laid end to end: equal to checksum() of the concatenated bytes, for
// a chunk read into several places (its margins into a scratch buffer, the rest into place).
struct ByteRun {
  const void* data;
  std::size_t bytes;
};
std::uint64_t checksum_of_parts(const std::vector<ByteRun>& parts);
// Writable memory that consecutive file bytes are read into (one iovec of a scattered read).
struct ByteSpan {
  std::byte* data;
  std::size_t bytes;
};
// Reads the file bytes [offset, offset + total of `spans`) into `spans` laid end to end
// (preadv, at most IOV_MAX spans a call); returns the calls made. Short reads are resumed; the
// end of the file is a truncation (InputError naming `path`).
int read_scattered(int fd, const std::vector<ByteSpan>& spans, std::uint64_t offset, const std::string& path);
// Backs the pages under `spans` with memory now, in one call a span (MADV_POPULATE_WRITE), not
// one fault a page while a read copies into them: fresh memory (a restarted process's state)
// costs a fault per 4 KiB otherwise. A hint: contents are unchanged and failures are ignored.
void populate(const std::vector<ByteSpan>& spans);
std::string hex64(std::uint64_t x);  // 16 lowercase hex digits

// ---- reads past the page cache (O_DIRECT), for measuring the disk (bench_ckpt's probe) ----
// Offsets, lengths and memory of direct reads are multiples of this.
constexpr std::size_t kDirectAlignBytes = 4096;
// Memory aligned for direct reads (kDirectAlignBytes), allocated untouched.
struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t bytes);
  std::byte* data() const { return data_.get(); }
  std::size_t size() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t bytes_ = 0;
};

}  // namespace dynatrain::ckpt
