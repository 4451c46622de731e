#include "job/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

namespace dynatrain::job {

namespace {

constexpr unsigned long kExitingFlag = 0x4;  // PF_EXITING: set as the exit begins (include/linux/sched.h)
constexpr int kStateField = 3, kParentField = 4, kFlagsField = 9, kStartField = 22, kExitCodeField = 52;  // proc(5)

// A decimal field (may be negative); `end` stops it.
long long parse_number(const char* p, const char* end) {
  bool negative = false;
  if (p < end && *p == '-') {
    negative = true;
    ++p;
  }
  long long value = 0;
  for (; p < end && *p >= '0' && *p <= '9'; ++p) value = value * 10 + (*p - '0');
  return negative ? -value : value;
}

}  // namespace

bool ProcStat::leaving() const { return ended() || (flags & kExitingFlag) != 0; }

int ProcStat::killed_by() const {
  if (!leaving()) return 0;
  const int sig = exit_code & 0x7f;
  return sig == 0x7f ? 0 : sig;  // 0x7f: a stopped status, not an ending
}

bool read_proc_stat(long pid, ProcStat& out) {
  char path[40] = "/proc/";
  int at = 6;
  char digits[24];
  int n_digits = 0;
  for (long v = pid; v > 0 && n_digits < 20; v /= 10) digits[n_digits++] = static_cast<char>('0' + v % 10);
  if (pid <= 0) return false;
  while (n_digits > 0) path[at++] = digits[--n_digits];
  for (const char* s = "/stat"; *s; ++s) path[at++] = *s;
  path[at] = '\0';
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  const char* end = buf + n;
  const char* p = nullptr;  // the fields after the name follow its last ')' (the name may hold any byte)
  for (const char* q = buf; q < end; ++q)
    if (*q == ')') p = q;
  if (p == nullptr) return false;
  out = ProcStat{};
  for (int field = 3; p < end; ++field) {
    while (p < end && *p != ' ') ++p;  // to the space before this field
    if (++p >= end) break;
    if (field == kStateField) out.state = *p;
    if (field == kParentField) out.parent = static_cast<long>(parse_number(p, end));
    if (field == kFlagsField) out.flags = static_cast<unsigned long>(parse_number(p, end));
    if (field == kStartField) out.start_ticks = static_cast<unsigned long long>(parse_number(p, end));
    if (field == kExitCodeField) out.exit_code = static_cast<int>(parse_number(p, end));
  }
  return true;
}

}  // namespace dynatrain::job
