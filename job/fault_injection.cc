#include "job/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/error.h"
#include "job/memory_copy_files.h"

namespace dynatrain::job {

namespace {

void write_stamp() {
  if (const char* stamp = std::getenv("DT_FAULT_STAMP")) {  // when it fired, for the test
    if (std::FILE* f = std::fopen(stamp, "w")) {
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      std::fprintf(f, "%.3f\n", std::chrono::duration<double>(now).count());
      std::fclose(f);
    }
  }
}

// `lose_memory`: the process and its node's shared memory go together.
void stamp_and_raise(int sig, int delay_ms, bool lose_memory) {
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  write_stamp();
  if (lose_memory) drop_memory_copy_of_this_process();
  raise(sig);
}

}  // namespace

bool fault_point(const char* point, int rank) {
  static bool fired = false;
  static std::map<std::string, int> reached;  // times each point was reached on this rank
  const char* specs = std::getenv("DT_FAULT");
  if (fired || !specs) return false;
  char action[16] = {}, where[32] = {};
  int delay_ms = 0, skip = 0;
  bool mine = false;
  for (const char* spec = specs; spec != nullptr && !mine; spec = std::strchr(spec, ',')) {
    if (*spec == ',') ++spec;
    int fault_rank = -1;
    skip = 0;
    const int n = std::sscanf(spec, "%15[a-z]:%d:%31[a-z-]:%d:%d", action, &fault_rank, where, &delay_ms, &skip);
    mine = n >= 4 && fault_rank == rank && std::strcmp(where, point) == 0;
  }
  if (!mine) return false;
  if (reached[point]++ < skip) return false;
  const bool miss = std::strcmp(action, "miss") == 0;  // (fired with another process's fault: no stamp)
  if (const char* stamp = std::getenv("DT_FAULT_STAMP"); !miss && stamp && access(stamp, F_OK) == 0) return false;
  fired = true;
  if (std::strcmp(action, "nan") == 0) {  // the caller poisons the value it produces next
    write_stamp();
    return true;
  }
  if (std::strcmp(action, "throw") == 0) {  // an exception on this rank only, at once
    write_stamp();
    throw std::runtime_error(std::string("injected fault at '") + point + "'");
  }
  if (miss)  // as a collective that met a lost peer
    throw CommError(std::string("injected fault at '") + point + "': this rank missed its completion");
  const int sig = std::strcmp(action, "stop") == 0 ? SIGSTOP : std::strcmp(action, "notice") == 0 ? SIGTERM : SIGKILL;
  const bool lose = std::strcmp(action, "lose") == 0;
  if (delay_ms <= 0) {
    stamp_and_raise(sig, 0, lose);
    return false;  // after a SIGSTOP, once continued
  }
  std::thread(stamp_and_raise, sig, delay_ms, lose).detach();
  return false;
}

}  // namespace dynatrain::job
