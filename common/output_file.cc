#include "common/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace dynatrain {

namespace {

[[noreturn]] void cannot_write(const std::string& what, const std::string& path, const std::string& reason) {
  DT_INPUT_ERROR("cannot write ", what, " file '", path, "': ", reason);
}

}  // namespace

void check_output_path(const std::string& what, const std::string& path) {
  if (path.empty()) return;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) cannot_write(what, path, "it is a directory");
    if (access(path.c_str(), W_OK) != 0) cannot_write(what, path, std::strerror(errno));
    return;
  }
  if (errno != ENOENT) cannot_write(what, path, std::strerror(errno));
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) cannot_write(what, path, "no directory '" + dir + "'");
  if (access(dir.c_str(), W_OK) != 0) cannot_write(what, path, "directory '" + dir + "': " + std::strerror(errno));
  // access() lets root pass where creating still fails (/proc, a read-only mount): try it.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return;  // made meanwhile (another rank's same check)
  if (fd < 0) cannot_write(what, path, std::strerror(errno));
  ::close(fd);
  ::unlink(path.c_str());
}

bool names_one_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto normal = [](const std::string& p) {
    std::error_code e;
    return fs::weakly_canonical(fs::absolute(p, e), e).lexically_normal();
  };
  return a == b || normal(a) == normal(b) || fs::equivalent(a, b, ec);
}

void check_written(std::ostream& out, const std::string& what, const std::string& path) {
  // A write that failed inside an earlier `<<` (a large write goes straight to the file) left
  // its errno; otherwise the flush's own.
  const bool failed_before = !out.good();
  const int errno_before = errno;
  errno = 0;
  out.flush();
  if (out.good()) return;
  const int err = failed_before ? errno_before : errno;
  cannot_write(what, path, err != 0 ? std::strerror(err) : "the write failed");
}

void write_output_file(const std::string& what, const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) cannot_write(what, path, std::strerror(errno));
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      close(fd);
      cannot_write(what, path, std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (close(fd) != 0) cannot_write(what, path, std::strerror(errno));
}

}  // namespace dynatrain
