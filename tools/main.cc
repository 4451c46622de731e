// dynatrain: plan, execute and train through parallel-layout switches. See docs/cli.md.
// Built twice (tools/torch_binary.h): `dynatrain`, without libtorch, which hands `train` and
// c10d worlds to `dynatrain-torch` (DT_TORCH_BINARY), which has every command.
#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <system_error>

#include "common/error.h"
#include "tools/commands.h"
#include "job/mpi_world.h"
#ifdef DT_HAVE_C10D
#include "comm/c10d/c10d_transport.h"
#endif
#ifdef DT_TORCH_BINARY
#include <sys/prctl.h>
#else
#include "tools/torch_binary.h"
#endif

int main(int argc, char** argv) {
#ifdef DT_HAVE_C10D
  dynatrain::job::set_env_world_factory(&dynatrain::comm::c10d_world_from_env);  // RANK, WORLD_SIZE, ...
#endif
#ifdef DT_TORCH_BINARY
  ::prctl(PR_SET_NAME, "dynatrain");  // the process's name stays the command's (pgrep -x dynatrain, top, ps)
#else
  if (dynatrain::tools::needs_torch_binary(argc, argv))
    if (const std::string torch = dynatrain::tools::torch_binary_path(); !torch.empty())
      return dynatrain::tools::run_in_torch_binary(torch, argv);
#endif
  CLI::App app{"DynaTrain: switch the parallel layout of a training job in memory"};
  app.require_subcommand(1);
  std::map<CLI::App*, dynatrain::tools::Command> commands;
  auto add = [&](dynatrain::tools::Command (*make)(CLI::App&)) {
    const std::size_t before = app.get_subcommands({}).size();
    auto run = make(app);
    commands[app.get_subcommands({}).at(before)] = std::move(run);
  };
  add(dynatrain::tools::add_plan_command);
  add(dynatrain::tools::add_run_transition_command);
  add(dynatrain::tools::add_train_command);
  add(dynatrain::tools::add_export_command);
  add(dynatrain::tools::add_request_command);
  add(dynatrain::tools::add_simulate_command);
  add(dynatrain::tools::add_launch_command);
  // Under mpirun every rank parses the same flags: rank 0 alone prints help and flag errors.
  const bool quiet = dynatrain::job::is_nonzero_mpi_rank();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return quiet ? 0 : app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return quiet ? 0 : app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (quiet)
      dynatrain::job::wait_for_root_report();
    else
      std::fprintf(stderr, "dynatrain: error: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const dynatrain::InputError& e) {
    // Errors reaching here come from a world of one rank, or from flag values checked before
    // MPI starts (identical on every rank of an mpirun job: rank 0 prints).
    if (quiet)
      dynatrain::job::wait_for_root_report();
    else
      std::fprintf(stderr, "dynatrain: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dynatrain: error: out of memory (std::bad_alloc); lower the model size or --mem-budget\n");
    return 3;
  } catch (const std::system_error& e) {  // the system refused a resource: threads, their stacks
    std::fprintf(stderr, "dynatrain: error: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dynatrain: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
