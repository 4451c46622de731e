#include "job/train_ckpt.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ckpt/file_io.h"
#include "common/clock.h"
#include "common/error.h"
#include "job/fault_injection.h"
#include "job/memory_copy.h"

namespace dynatrain::job {

ckpt::Arenas view(train::Arenas& a) {
  ckpt::Arenas out;
  out.buffer = [&a](const vps::LocalBuffer& b) { return a.bytes(b); };
  return out;
}

const std::vector<vps::StateKind>& saved_kinds() {
  static const std::vector<vps::StateKind> kinds = vps::parse_state_kinds("param,master,exp_avg,exp_avg_sq");
  return kinds;
}

bool rebuilds_params(const std::vector<vps::StateKind>& kinds) {
  const auto holds = [&](vps::StateKind k) { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); };
  return !holds(vps::StateKind::kParam) && holds(vps::StateKind::kMaster);
}

namespace {

std::string hash_of(const std::string& bytes) { return ckpt::hex64(ckpt::checksum(bytes.data(), bytes.size())); }

bool same_directory(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || std::filesystem::equivalent(a, b, ec);
}

// "" when a file can be created in `dir` (made first when missing), else why not.
std::string unwritable(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "cannot create checkpoint directory '" + dir + "': " + ec.message();
  const std::string probe = (std::filesystem::path(dir) / (".write-probe-" + std::to_string(getpid()))).string();
  const int fd = open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  const int err = errno;
  if (fd < 0) return "checkpoint directory '" + dir + "' is not writable: " + std::strerror(err);
  const bool wrote = write(fd, "x", 1) == 1;
  const int werr = errno;
  close(fd);
  unlink(probe.c_str());
  if (!wrote) return "checkpoint directory '" + dir + "' is not writable: " + std::strerror(werr);
  return "";
}

}  // namespace

std::string identity_schedule(const TrainArgs& args) {
  if (const char* given = std::getenv("DT_RUN_SCHEDULE")) return given;
  auto entries = parse_schedule(args.schedule);
  if (args.static_layout) entries.resize(1);
  std::string out;
  for (const auto& [step, config] : entries)
    out += (out.empty() ? "" : ";") + std::to_string(step) + ":" + config.str();
  return out;
}

nlohmann::json run_identity(const TrainArgs& args, const vps::ModelSpec& model, const std::string& text) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : vps::build_tensors(model)) tensors.push_back({t.name, t.shape});
  return {{"model", model.name + " " + hash_of(tensors.dump())},
          {"data", hash_of(text)},
          {"data_file", args.data.empty() ? std::string("embedded") : args.data},  // named in messages, not compared
          {"seed", args.seed},
          {"lr", args.lr},
          {"schedule", hash_of(identity_schedule(args))}};
}

std::string identity_difference(const nlohmann::json& run, const nlohmann::json& saved) {
  if (!saved.is_object()) return "it records no run identity (saved before checkpoints carried one)";
  for (const char* field : {"model", "data", "seed", "lr", "schedule"}) {
    const auto it = saved.find(field);
    if (it != saved.end() && *it == run.at(field)) continue;
    // The data is a hash: the files say more, unless they are the same file (edited since).
    const nlohmann::json file = saved.value("data_file", nlohmann::json()), here = run.at("data_file");
    if (std::string(field) == "data" && file.is_string() && file != here)
      return detail::concat("its data is ", file.dump(), ", this run's ", here.dump());
    return detail::concat("its ", field, " is ", it == saved.end() ? "missing" : it->dump(), ", this run's ",
                          run.at(field).dump());
  }
  return "";
}

std::string save_dir_problem(const TrainArgs& args, const nlohmann::json& run, const vps::ModelSpec& model) {
  if (args.save_dir.empty()) return "";
  if (std::string why = unwritable(args.save_dir); !why.empty()) return why;
  if (!args.resume_dir.empty() && same_directory(args.resume_dir, args.save_dir)) return "";
  const std::string continue_it = "; continue it with --resume " + args.save_dir + ", or save into another directory";
  try {
    const std::string name = ckpt::latest_step_name(args.save_dir);
    if (name.empty()) return "";
    // The identity names another model too (its tensors' hash): no need to build its layout.
    const nlohmann::json index = ckpt::read_step_index(args.save_dir, name);
    const auto step = index.value("step", std::int64_t{-1});
    const auto trainer = index.value("trainer", nlohmann::json::object());
    const std::string diff =
        identity_difference(run, trainer.is_object() ? trainer.value("run", nlohmann::json()) : nlohmann::json());
    // A restart from the memory copy (job/memory_copy.h) continues this run's --save directory.
    const std::string copy = memory_copy_dir();
    if (diff.empty() && !copy.empty() && !args.resume_dir.empty() && same_directory(args.resume_dir, copy)) return "";
    if (diff.empty())
      return detail::concat("--save directory '", args.save_dir, "' already holds this run's checkpoint of step ", step,
                            continue_it);
    return detail::concat("--save directory '", args.save_dir, "' holds another run's checkpoint (step ", step,
                          "): ", diff, continue_it);
  } catch (const InputError& e) {
    return detail::concat("--save directory '", args.save_dir,
                          "' holds a checkpoint that cannot be checked: ", e.what(), "; save into another directory");
  }
}

nlohmann::json saved_progress(train::Trainer& trainer, std::int64_t step, const nlohmann::json& run) {
  const auto p = trainer.progress();
  return {{"step", step}, {"data_seed", p.data_seed}, {"data_position", p.data_position}, {"run", run}};
}

void save_trainer(const std::string& dir, std::int64_t step, train::Trainer& trainer, comm::Transport& world,
                  const nlohmann::json& run, bool final) {
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 0 (in every layout) writes the index; its progress is the job's.
  if (world.rank() == 0) DT_CHECK_EQ(trainer.progress().step, step);
  const nlohmann::json state = saved_progress(trainer, step, run);
  // Fault tests kill a rank at a chosen phase of the save (job/fault_injection.h); a `nan`
  // fault there fails the rank's write as a full disk does.
  const auto observer = [&dir](ckpt::SavePhase phase, int rank) {
    if (fault_point(ckpt::save_phase_name(phase), rank))
      DT_INPUT_ERROR("cannot write into checkpoint directory '", dir, "': ", std::strerror(ENOSPC), " (injected)");
  };
  try {
    ckpt::save(dir, step, trainer.layout(), saved_kinds(), view(trainer.arenas()), state, world, observer);
  } catch (const InputError& e) {
    if (final) throw;
    // Every rank threw alike (ckpt::save agrees after each phase): all go on together.
    if (world.rank() == 0) {
      std::string kept;
      try {
        kept = ckpt::latest_step_name(dir);
      } catch (const InputError&) {
      }
      std::error_code ec;  // what the abandoned save wrote: its space back, nothing half-written left
      if (kept != ckpt::step_dir_name(step))
        std::filesystem::remove_all(std::filesystem::path(dir) / ckpt::step_dir_name(step), ec);
      std::printf("checkpoint of step %lld abandoned: %s; %s, training goes on\n", static_cast<long long>(step),
                  e.what(), kept.empty() ? "no checkpoint yet" : ("'latest' still names " + kept).c_str());
      std::fflush(stdout);
    }
    return;
  }
  if (world.rank() == 0) {
    std::printf("saved checkpoint of step %lld to %s/%s in %.3f s\n", static_cast<long long>(step), dir.c_str(),
                ckpt::step_dir_name(step).c_str(), seconds_since(t0));
    std::fflush(stdout);
  }
}

namespace {

// ", rank files 1, 3 read from their buddies' copies" when some rank file is missing (its node
// lost) and its copy (job/memory_copy.h) stands in for it; "" otherwise.
std::string copies_read_note(const ckpt::Checkpoint& c) {
  std::string ranks;
  for (std::size_t r = 0; r < c.files.size(); ++r)
    if (ckpt::rank_file_path(c, static_cast<int>(r)) != c.step_dir + "/" + c.files[r].name)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return ranks.empty() ? "" : ", rank files " + ranks + " read from their buddies' copies";
}

}  // namespace

void resume_trainer(const ckpt::Checkpoint& c, train::Trainer& trainer, comm::Transport& world) {
  const auto t0 = std::chrono::steady_clock::now();
  // Identical on every rank (same index, same flags): a --bf16 checkpoint holds 2-byte params.
  const int saved = c.elem_bytes[static_cast<int>(vps::StateKind::kParam)];
  const int here = trainer.layout().options().elem_bytes[static_cast<int>(vps::StateKind::kParam)];
  if (saved != here)
    DT_INPUT_ERROR("checkpoint '", c.step_dir, "' holds ", saved == 2 ? "bf16" : "fp32", " params (saved ",
                   saved == 2 ? "with" : "without", " --bf16); resume it ", saved == 2 ? "with" : "without", " --bf16");
  const auto holds = [&](vps::StateKind k) { return std::find(c.kinds.begin(), c.kinds.end(), k) != c.kinds.end(); };
  if (!holds(vps::StateKind::kParam) && !holds(vps::StateKind::kMaster)) {
    std::string kinds;
    for (vps::StateKind k : c.kinds) kinds += (kinds.empty() ? "" : ",") + std::string(vps::state_kind_name(k));
    DT_INPUT_ERROR("checkpoint '", c.step_dir, "' holds neither params nor master weights (its kinds: ", kinds,
                   "); a train checkpoint holds param or master, and exp_avg, exp_avg_sq");
  }
  ckpt::LoadStats stats;
  ckpt::on_all_ranks(world, "checkpoint load", [&] {
    if (trainer.active()) stats = ckpt::load_rank(c, trainer.layout(), world.rank(), view(trainer.arenas()));
  });
  // The memory copy holds no params (job/memory_copy.h: copied_kinds): rebuilt from master.
  if (rebuilds_params(c.kinds) && trainer.active()) trainer.params_from_master();
  train::Trainer::Progress p;
  try {
    p.step = c.trainer.at("step").get<std::int64_t>();
    p.data_seed = c.trainer.at("data_seed").get<std::uint64_t>();
    p.data_position = c.trainer.at("data_position").get<std::uint64_t>();
  } catch (const std::exception& e) {
    DT_INPUT_ERROR("checkpoint '", c.step_dir, "' holds no trainer progress (step, data cursor): ", e.what());
  }
  trainer.restore_progress(p);
  world.barrier();
  if (world.rank() == 0) {
    std::printf("resumed from %s (saved in %s, %zu files%s) into %s: step %lld, %.3f s, rank 0 read %.1f MB\n",
                c.step_dir.c_str(), c.config.str().c_str(), c.files.size(), copies_read_note(c).c_str(),
                trainer.config().str().c_str(), static_cast<long long>(p.step), seconds_since(t0),
                stats.bytes_read / 1e6);
    std::fflush(stdout);
  }
}

}  // namespace dynatrain::job
