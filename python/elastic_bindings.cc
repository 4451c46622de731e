// dynatrain._native's side of process-count changes (python/elastic.h): plain Python values
// in and out; dynatrain/_elastic.py pickles the carried state and builds the mpi4py
// communicator of the new world from world_handle().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "python/bindings.h"
#include "python/elastic.h"

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

}  // namespace

void bind_elastic(py::module_& m) {
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
