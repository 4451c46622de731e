// dynatrain._native's side of process-count changes (python/elastic.h): plain Python values
// in and out; dynatrain/_elastic.py pickles the carried state and builds the mpi4py
// communicator of the new world from world_handle(). Also the job runtime's pieces a Python job
// shares with the CLI (dynatrain/_notice.py, _watchdog.py): preemption notices (job/notice.h),
// the failure path's one line (job/mpi_world.h), the survivors' layout, the watchdog setting.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "job/mpi_world.h"
#include "job/notice.h"
#include "job/survivor_layout.h"
#include "job/watchdog.h"
#include "python/bindings.h"
#include "python/c10d_bindings.h"
#include "python/elastic.h"
#include "python/lease_bindings.h"
#include "edm/copy_holders.h"

namespace py = pybind11;

namespace dynatrain::python {
namespace {

edm::MpiLaunchSettings launch_settings(const std::string& executable) {
  edm::MpiLaunchSettings s;
  s.executable = executable;
  return s;
}

py::dict outcome_dict(const ElasticOutcome& o) {
  py::dict d = stats_dict(o.stats);
  d["left"] = o.left;
  d["job"] = py::bytes(o.job);
  py::list mine;
  for (const std::string& m : o.mine) mine.append(py::bytes(m));
  d["mine"] = mine;
  d["world_before"] = o.world_before;
  d["world_after"] = o.world_after;
  d["spawn_seconds"] = o.spawn_seconds;
  return d;
}

// Notices, the failure path, the survivors' layout and the watchdog setting (the header's
// second paragraph).
void bind_job_runtime(py::module_& m) {
  // The notice handler for `signal` (a --notice-signal name; "none": off) and its deadline
  // thread, once per process; returns the signal number (0: off).
  m.def("enable_notices", [](const std::string& signal, double seconds) {
    if (!(seconds > 0)) DT_INPUT_ERROR("notice_s=", seconds, ": valid: seconds > 0");
    const int sig = job::parse_notice_signal(signal);
    job::enable_notices({sig, seconds,
                         "the job ends; resume it from its newest checkpoint with adopt(..., resume=DIR) "
                         "(notice_save=DIR or Manager.save writes one)"});
    return job::notices_enabled() ? sig : 0;
  });
  // Collective over the manager's world: [(world rank, pid)] with a notice not yet acted on.
  m.def("agree_on_notices", [](Manager& self, double slowest_step_s) {
    job::NoticeAgreement a;
    {
      py::gil_scoped_release unlocked;
      a = job::agree_on_notices(self.world(), slowest_step_s);
    }
    std::vector<std::pair<int, int>> noticed;
    for (const auto& n : a.noticed) noticed.emplace_back(n.rank, n.pid);
    return noticed;
  });
  m.def("notice_taken", &job::notice_taken);
  m.def("notice_signal_name", &job::notice_signal_name);
  m.def("describe_noticed", [](const std::vector<std::pair<int, int>>& noticed) {
    std::vector<job::NoticedProcess> n;
    for (const auto& [rank, pid] : noticed) n.push_back({rank, pid});
    return job::describe_noticed(n);
  });
  m.attr("EVERY_PROCESS_NOTICED") = job::kEveryProcessNoticed;
  // Collective over an MPI world (nothing on another): the failure path's one line for a
  // signal, naming a peer of this node whose process is gone, for this world's ranks.
  m.def("watch_world", [](Manager& self) {
    py::gil_scoped_release unlocked;
    job::note_world_after_switch(self.world());
  });
  // The layout for at most `processes` processes (job/survivor_layout.h) among those `runs`
  // accepts (a callable on a config string); None when it accepts none.
  m.def("survivor_layout", [](const std::string& previous, int processes, const py::function& runs) {
    const auto chosen = job::survivor_layout(vps::ParallelConfig::parse(previous), processes,
                                             [&](const vps::ParallelConfig& c) { return runs(c.str()).cast<bool>(); });
    return chosen ? py::object(py::str(chosen->str())) : py::object(py::none());
  });
  m.def("watchdog_seconds", &job::watchdog_seconds);
  m.attr("DEFAULT_WATCHDOG_SECONDS") = job::kDefaultWatchdogSeconds;
}

// Kind masks (bit k = StateKind k) as Python sees them: lists of kind names.
std::vector<std::string> kind_names(std::uint32_t mask) {
  std::vector<std::string> out;
  for (int k = 0; k < vps::kNumStateKinds; ++k)
    if (mask >> k & 1u) out.emplace_back(vps::state_kind_name(static_cast<vps::StateKind>(k)));
  return out;
}

std::uint32_t kind_mask(const std::vector<std::string>& names) {
  std::uint32_t mask = 0;
  for (const auto& name : names)
    for (const auto kind : vps::parse_state_kinds(name)) mask |= vps::kind_bit(kind);
  return mask;
}

std::uint32_t copy_absent_mask(const Manager& m, int rank, const std::vector<std::string>& nodes) {
  return exec::kStepBoundaryKinds | edm::kinds_held_on_other_nodes(m.layout(), rank, nodes);
}

// Copies of other ranks' state (redundancy 2, dynatrain/_redundancy.py): who keeps whose
// (edm/copy_holders.h) and the manager's held copies (python/manager.h).
void bind_copies(py::module_& m) {
  m.def("copy_holders", &edm::copy_holders, py::arg("node_of_rank"));
  m.def("copies_kept_by", &edm::copies_kept_by, py::arg("holders"), py::arg("rank"));
  // The kinds a copy of `rank` does not keep: no grads (a recovery zeroes them), nor the kinds
  // a rank on another node holds the same of (edm::kinds_held_on_other_nodes: a dp replica).
  m.def(
      "copy_absent_kinds",
      [](const Manager& self, int rank, const std::vector<std::string>& nodes) {
        return kind_names(copy_absent_mask(self, rank, nodes));
      },
      py::arg("manager"), py::arg("rank"), py::arg("node_of_rank"));
  m.def(
      "hold_copies",
      [](Manager& self, const std::vector<int>& ranks, const std::vector<std::string>& nodes) {
        py::gil_scoped_release unlocked;
        std::vector<std::uint32_t> absent;
        for (int r : ranks) absent.push_back(copy_absent_mask(self, r, nodes));
        self.hold_copies(ranks, absent);
      },
      py::arg("manager"), py::arg("ranks"), py::arg("node_of_rank"));
  m.def("drop_copies", &Manager::drop_copies);
  m.def("copy_bytes", &Manager::copy_bytes);
  // Per held copy, (rank, [(BufferLease or None, kind) per buffer]), the leases pinning them.
  m.def("copy_buffers", [](const std::shared_ptr<Manager>& self) {
    py::list out;
    for (std::size_t c = 0; c < self->copies().size(); ++c) {
      py::list buffers;
      const auto& copy = self->copies()[c];
      for (std::size_t i = 0; i < copy.buffers.size(); ++i)
        buffers.append(py::make_tuple(copy_lease(self, c, i), vps::state_kind_name(copy.layout.buffers[i].kind)));
      out.append(py::make_tuple(copy.rank, buffers));
    }
    return out;
  });
}

// Shrink and vacate on a world that cannot start processes (torch.distributed's).
void bind_in_place(py::module_& m) {
  // A shrink or vacate over the world itself (python/elastic.h), for a world that cannot start
  // processes (torch.distributed): the switch's statistics and `left`.
  m.def(
      "elastic_in_place",
      [](Manager& self, const std::string& to, const std::vector<int>& vacate) {
        const auto config = vps::ParallelConfig::parse(to);
        ElasticOutcome o;
        {
          py::gil_scoped_release unlocked;
          o = switch_in_place(self, config, vacate);
        }
        return outcome_dict(o);
      },
      py::arg("manager"), py::arg("to"), py::arg("vacate"));
  // A lost process recovered in place (python/elastic.h): the manager's world is the survivors'.
  m.def(
      "recover_in_place",
      [](Manager& self, const std::string& to, const std::vector<int>& survivors, int world_before,
         const std::vector<std::tuple<int, int, std::vector<std::string>>>& copies) {
        const auto config = vps::ParallelConfig::parse(to);
        std::vector<plan::SwitchPlacement::Copy> held;
        for (const auto& [rank, process, absent] : copies) held.push_back({rank, process, kind_mask(absent)});
        ElasticOutcome o;
        {
          py::gil_scoped_release unlocked;
          o = recover_in_place(self, config, survivors, world_before, held);
        }
        return outcome_dict(o);
      },
      py::arg("manager"), py::arg("to"), py::arg("survivors"), py::arg("world_before"),
      py::arg("copies") = std::vector<std::tuple<int, int, std::vector<std::string>>>{});
  m.def("in_place_placement", &in_place_placement, py::arg("ranks"), py::arg("world_size"), py::arg("vacate"));
  // The manager's world from now on: a transport c10d_world() built, which `world` keeps (the
  // caller keeps `world` as long as the manager).
  m.def("use_world", [](Manager& self, PendingWorld& world) {
    if (!world.transport) DT_INPUT_ERROR("this c10d world was given to a Manager already; build one per Manager");
    self.set_world(world.transport.get());
  });
}

}  // namespace

void bind_elastic(py::module_& m) {
  bind_job_runtime(m);
  bind_in_place(m);
  bind_copies(m);
  // A process a grow started, between join_job() and the Manager constructed over it.
  py::class_<Elastic, std::shared_ptr<Elastic>>(m, "JoinedJob")
      .def("current", &Elastic::joined_current)
      .def("payload", [](const Elastic& self) { return py::bytes(self.joined_payload()); });
  // The job that started this process, or None; at most once per process. Collective with
  // the starters' grow. `executable`: what this process would start in later grows.
  m.def(
      "join_job",
      [](const std::string& executable) {
        py::gil_scoped_release unlocked;
        return Elastic::join(launch_settings(executable));
      },
      py::arg("executable"));
  m.def(
      "elastic_switch",
      [](Manager& self, const std::string& to, const std::vector<int>& vacate, const std::string& executable,
         const py::bytes& payload, const py::bytes& job, const py::bytes& mine) {
        ElasticRequest r{vps::ParallelConfig::parse(to), vacate, launch_settings(executable), payload, job, mine};
        ElasticOutcome o;
        {
          py::gil_scoped_release unlocked;
          o = switch_processes(self, r);
        }
        return outcome_dict(o);
      },
      py::arg("manager"), py::arg("to"), py::arg("vacate"), py::arg("executable"), py::arg("payload"), py::arg("job"),
      py::arg("mine"));
  // The two halves of elastic_switch: start preparing (returns at once), commit later.
  m.def(
      "elastic_prepare",
      [](Manager& self, const std::string& to, const std::vector<int>& vacate, const std::string& executable,
         const py::bytes& payload) {
        ElasticRequest r{vps::ParallelConfig::parse(to), vacate, launch_settings(executable), payload, {}, {}};
        py::gil_scoped_release unlocked;
        prepare_processes(self, r);
      },
      py::arg("manager"), py::arg("to"), py::arg("vacate"), py::arg("executable"), py::arg("payload"));
  m.def(
      "elastic_commit",
      [](Manager& self, const py::bytes& job, const py::bytes& mine) {
        ElasticOutcome o;
        {
          py::gil_scoped_release unlocked;
          o = commit_processes(self, job, mine, std::chrono::steady_clock::now());
        }
        return outcome_dict(o);
      },
      py::arg("manager"), py::arg("job"), py::arg("mine"));
  m.def("finish_join", [](Manager& self) {
    ElasticOutcome o;
    {
      py::gil_scoped_release unlocked;
      o = finish_join(self);
    }
    return outcome_dict(o);
  });
  // Processes a config needs (its world size); ValueError for a config that does not parse.
  m.def("world_size_of", [](const std::string& config) { return vps::ParallelConfig::parse(config).world_size(); });
  // The Fortran handle of the manager's world now (an MPI communicator the manager owns;
  // dynatrain duplicates it for mpi4py).
  m.def("world_handle", [](const Manager& self) -> std::int64_t {
    auto* mpi = dynamic_cast<comm::MpiTransport*>(&self.world());
    DT_CHECK(mpi != nullptr, "the manager's world is not an MPI communicator");
    return MPI_Comm_c2f(mpi->comm());
  });
}

}  // namespace dynatrain::python
