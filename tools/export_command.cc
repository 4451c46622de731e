// `dynatrain export --hf OUT --from DIR --model M`: a checkpoint's weights as one unsharded
// Hugging Face safetensors file (ckpt/hf_export.h).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "ckpt/hf_export.h"
#include "common/error.h"
#include "tools/commands.h"
#include "common/clock.h"

namespace dynatrain::tools {

namespace {

struct ExportArgs {
  std::string hf_dir;
  std::string from;
  std::string model = "tiny-dense";
};

int run_export(const ExportArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const vps::ModelSpec model = vps::model_from_name(a.model);
  const ckpt::Checkpoint c = ckpt::open_latest(a.from, model);
  const auto stats = ckpt::export_hf(c, model, a.hf_dir);
  // A model given as config.json travels with the weights.
  if (a.model.ends_with(".json"))
    std::filesystem::copy_file(a.model, a.hf_dir + "/config.json", std::filesystem::copy_options::overwrite_existing);
  const double s = seconds_since(t0);
  std::printf("exported %s (step %lld, saved in %s) to %s/model.safetensors: %lld tensors, %.1f MB, %.2f s\n",
              c.step_dir.c_str(), static_cast<long long>(c.step), c.config.str().c_str(), a.hf_dir.c_str(),
              static_cast<long long>(stats.tensors), stats.bytes / 1e6, s);
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "Write a checkpoint's weights as Hugging Face safetensors");
  cmd->add_option("--hf", args->hf_dir, "Output directory (model.safetensors, config.json)")->required();
  cmd->add_option("--from", args->from, "Checkpoint directory (train --save DIR)")->required();
  cmd->add_option("--model", args->model, "The checkpoint's model: preset or Hugging Face config.json")
      ->capture_default_str();
  return [args] { return run_export(*args); };
}

}  // namespace dynatrain::tools
