#include "job/sibling_loss.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace dynatrain::job {

SiblingPipe SiblingPipe::open() {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0)
    throw CommError(detail::concat("launch: no pipe for a process's loss notices: ", std::strerror(errno)));
  SiblingPipe pipe;
  pipe.read_ = ends[0];
  pipe.write_ = ends[1];
  fcntl(pipe.write_, F_SETFL, fcntl(pipe.write_, F_GETFL) | O_NONBLOCK);
  return pipe;
}

void SiblingPipe::pass_to_this_process() const {
  close(write_);
  fcntl(read_, F_SETFD, 0);  // kept across exec
  setenv(kSiblingLossFdVariable, std::to_string(read_).c_str(), 1);
}

int SiblingPipe::keep_write_end() {
  close(read_);
  read_ = -1;
  return write_;
}

void tell_siblings(const std::vector<int>& write_ends, pid_t lost) {
  static const bool ignored = [] {
    signal(SIGPIPE, SIG_IGN);  // a process that closed its end must not end the launcher
    return true;
  }();
  (void)ignored;
  const std::string line = std::to_string(static_cast<long>(lost)) + "\n";
  for (int fd : write_ends)
    if (fd >= 0) {
      const ssize_t n = write(fd, line.data(), line.size());  // atomic (< PIPE_BUF); full: dropped
      (void)n;
    }
}

namespace {

// The fd DYNATRAIN_LAUNCH_FD names, when it is an open pipe; -1 otherwise.
int inherited_fd() {
  const char* text = std::getenv(kSiblingLossFdVariable);
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  struct stat st {};
  if (*end != '\0' || fd < 0 || fd > 1 << 20 || fstat(static_cast<int>(fd), &st) != 0 || !S_ISFIFO(st.st_mode))
    return -1;
  return static_cast<int>(fd);
}

}  // namespace

SiblingLossReader::SiblingLossReader() : SiblingLossReader(inherited_fd()) {}

SiblingLossReader::SiblingLossReader(int fd) : fd_(fd) {
  if (fd_ >= 0) fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

std::vector<long> SiblingLossReader::read_reported() {
  std::vector<long> pids;
  if (fd_ < 0) return pids;
  char buffer[512];
  while (true) {
    const ssize_t n = read(fd_, buffer, sizeof buffer);
    if (n > 0) {
      partial_.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) fd_ = -1;  // the launcher is gone: nothing more will come (the fd stays open, unread)
    break;                 // EAGAIN: nothing more now
  }
  std::size_t start = 0;
  for (std::size_t eol; (eol = partial_.find('\n', start)) != std::string::npos; start = eol + 1) {
    const long pid = std::atol(partial_.c_str() + start);
    if (pid > 0) pids.push_back(pid);
  }
  partial_.erase(0, start);
  return pids;
}

}  // namespace dynatrain::job
