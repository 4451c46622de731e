#include "tools/fault_injection.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace dynatrain::tools {

void fault_point(const char* point, int rank) {
  static bool fired = false;
  const char* spec = std::getenv("DT_FAULT");
  if (fired || !spec) return;
  char action[16] = {}, where[32] = {};
  int fault_rank = -1, delay_ms = 0;
  if (std::sscanf(spec, "%15[a-z]:%d:%31[a-z]:%d", action, &fault_rank, where, &delay_ms) != 4) return;
  if (fault_rank != rank || std::strcmp(where, point) != 0) return;
  const int sig = std::strcmp(action, "stop") == 0 ? SIGSTOP : SIGKILL;
  fired = true;
  std::thread([sig, delay_ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    if (const char* stamp = std::getenv("DT_FAULT_STAMP")) {  // when it fired, for the test
      if (std::FILE* f = std::fopen(stamp, "w")) {
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        std::fprintf(f, "%.3f\n", std::chrono::duration<double>(now).count());
        std::fclose(f);
      }
    }
    raise(sig);
  }).detach();
}

}  // namespace dynatrain::tools
