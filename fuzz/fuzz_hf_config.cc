// libFuzzer target: the Hugging Face config.json reader (vps::model_from_hf_config reads a
// path, so the bytes go to a file in /dev/shm first). A model it accepts must lay out, or be
// refused by the layout with an InputError; nothing else may escape. The file is removed when
// the fuzzer exits (libFuzzer ends by exit(), which runs static destructors).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/error.h"
#include "vps/layout.h"
#include "vps/model_spec.h"

using namespace dynatrain;

namespace {
struct ScratchFile {
  std::string path = "/dev/shm/dt-fuzz-hf-" + std::to_string(getpid()) + ".json";
  ~ScratchFile() { unlink(path.c_str()); }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ScratchFile scratch;
  const std::string& path = scratch.path;
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  try {
    const vps::ModelSpec model = vps::model_from_hf_config(path);
    const vps::Layout layout(model, vps::ParallelConfig::parse("tp=1"));
    (void)layout.rank_layout(0);
  } catch (const InputError&) {
  }
  return 0;
}
