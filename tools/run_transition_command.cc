// `dynatrain run-transition`: flags only; tools/run_transition_cli.h does the work.
#include "common/bytes.h"
#include "tools/run_transition_cli.h"
#include "tools/commands.h"
#include "tools/flag_checks.h"
#include "job/mpi_world.h"

namespace dynatrain::tools {

Command add_run_transition_command(CLI::App& app) {
  auto args = std::make_shared<tools::RunTransitionArgs>();
  auto budget = std::make_shared<std::string>("256MiB");
  auto* cmd =
      app.add_subcommand("run-transition", "Switch real state between layouts on every rank (run under mpirun)");
  cmd->add_option("--model", args->model, "Preset name or path to a Hugging Face config.json")->required();
  cmd->add_option("--from", args->from, "Source config, e.g. tp=2,pp=2,dp=2")->required();
  cmd->add_option("--to", args->to, "Destination config")->required();
  cmd->add_option("--mem-budget", *budget, "Staging memory per rank, e.g. 256MiB")->capture_default_str();
  cmd->add_flag("--at-step-boundary", args->at_step_boundary,
                "Gradients hold nothing at a step boundary: allocate them zeroed in the new layout "
                "instead of moving them (bytes saved reported)");
  cmd->add_flag("--prefault,!--no-prefault", args->prefault,
                "Touch the memory the switch will take beyond the source's before the first switch, as "
                "the elastic device manager does while training runs (reported as prepare_seconds); on "
                "by default, --no-prefault (or --prefault=false) builds the cold switch in fresh pages")
      ->capture_default_str();
  cmd->add_flag("--huge-pages,!--no-huge-pages", args->huge_pages,
                "Keep the state in 2 MiB pages where the kernel's transparent huge pages are in madvise or "
                "always mode, made resident where the pool grows (huge_pages, thp_mode, huge_page_share); "
                "on by default, --no-huge-pages keeps 4 KiB pages")
      ->capture_default_str();
  cmd->add_flag("--align-pages,!--no-align-pages", args->align_pages,
                "Start every tensor on a 4 KiB page boundary in its buffers, so kept tensors that move "
                "to a new offset are remapped instead of copied (kept_remapped_bytes); on by default, "
                "--no-align-pages (or --align-pages=false) packs them")
      ->capture_default_str();
  cmd->add_flag("--no-direct-runs{false}", args->direct_runs,
                "Pack and unpack every chunk that is not one contiguous run, instead of moving scattered "
                "runs straight between buffers (for comparison)");
  add_link_schedule_options(cmd, args->overlap_links, args->rounds_in_flight);
  cmd->add_option("--keep-path", args->keep_path,
                  "How kept runs at a new offset are kept: auto (remap runs at least as long as this "
                  "machine's measured break-even of a remap against a copy, copy the rest), remap (every "
                  "whole page), copy")
      ->check(CLI::IsMember({"auto", "remap", "copy"}))
      ->capture_default_str();
  cmd->add_flag("--verify", args->verify, "Check every destination element; exit 1 on the first wrong one");
  cmd->add_option("--repeat", args->repeat, "Timed forward switches (first cold, rest warm)")
      ->check(whole_number_in(1, 1'000'000))
      ->capture_default_str();
  cmd->add_option("--json", args->json, "Write the figures as JSON to this file");
  cmd->add_option("--bucket-elems", args->bucket_elems, "ZeRO bucket size in elements (0: 40M)")
      ->check(whole_number_in(std::int64_t{0}, std::int64_t{1} << 40, " (0: 40M)"))
      ->capture_default_str();
  cmd->add_option("--states", args->kinds, "State kinds: all, optimizer, or a list")->capture_default_str();
  cmd->add_option("--gpus-per-node", args->gpus_per_node, "Ranks per node")
      ->check(whole_number_in(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--placement", args->placement, "Which process takes each destination rank: fixed, auto, or a list")
      ->capture_default_str();
  cmd->add_option("--fanout", args->fanout,
                  "Node-level fan-out: a box that several processes of one node need from another node "
                  "crosses once, then a relay passes it on inside the node; a box one source sends to "
                  "several nodes goes by a tree across them (one engine call a stage): off, auto "
                  "(where the cost rule says it saves time), on")
      ->check(CLI::IsMember({"off", "auto", "on"}))
      ->capture_default_str();
  cmd->add_option("--fanout-cluster", args->fanout_cluster,
                  "The cluster whose link rates --fanout auto weighs: a preset (a800-16x8, ...) or a JSON "
                  "file (default: A800-class rates)");
  return [args, budget] {
    // Checked before MPI starts: identical on every rank, printed once by rank 0.
    args->mem_budget = parse_bytes(*budget);
    return job::run_on_mpi_world([&](comm::Transport& world) { return tools::run_transition_command(*args, world); });
  };
}

}  // namespace dynatrain::tools
