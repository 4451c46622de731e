// libFuzzer target: the `train --schedule` grammar (job/schedule.cc). Any input is a schedule
// starting at step 0 with increasing steps, or an InputError; nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "job/train_job.h"

using namespace dynatrain;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto schedule = job::parse_schedule(text);
    if (schedule.empty() || schedule.front().first != 0) __builtin_trap();
    for (std::size_t i = 1; i < schedule.size(); ++i)
      if (schedule[i].first <= schedule[i - 1].first) __builtin_trap();
  } catch (const InputError&) {
  }
  return 0;
}
