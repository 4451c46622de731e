// libFuzzer target: the config grammar. Any input is either a config that every later step
// accepts consistently, or an InputError; nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "vps/layout.h"
#include "vps/parallel_config.h"

using namespace dynatrain;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  vps::ParallelConfig config;
  try {
    config = vps::ParallelConfig::parse(text);
  } catch (const InputError&) {
    return 0;
  }
  // A parsed config prints canonically and parses back to itself.
  if (!(vps::ParallelConfig::parse(config.str()) == config) && config.pp_layers.empty()) __builtin_trap();
  for (const char* name : {"tiny-dense", "tiny-moe", "llama2-70b"}) {
    try {
      vps::ParallelConfig c = config;
      c.validate_for(vps::model_from_name(name));
      if (c.world_size() <= 64) {  // lay out a couple of ranks of small worlds
        const vps::Layout layout(vps::model_from_name(name), c);
        (void)layout.rank_layout(c.world_size() - 1);
      }
    } catch (const InputError&) {
    }
  }
  return 0;
}
