// dynatrain._native.c10d_world(group, store, ...): a comm::Transport over a torch.distributed
// process group the user's Python code already built (python/README.md, "torch.distributed").
//
// The Python objects torch hands out (torch._C._distributed_c10d.ProcessGroup, .Store) are
// pybind11 instances registered by libtorch_python. This extension is built against the same
// pybind11 internals (version 4, same compiler and C++ ABI: the internals id is checked by
// pybind11 itself), so it finds those registered types and casts an instance to the raw C++
// pointer; the pointer then becomes a new owning c10::intrusive_ptr (the object is an
// intrusive_ptr_target already owned by its Python holder). When the internals differ (a torch
// built elsewhere), the cast fails with a pybind11 cast error, turned into a ValueError here:
// never a reinterpretation of foreign memory.
#include "python/c10d_bindings.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

#include <pybind11/stl.h>

#if DT_PYTHON_C10D
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/c10d/c10d_membership.h"
#include "comm/c10d/process_group_transport.h"
#include "job/loss_watch.h"
#include "job/lost_peer.h"
#endif

namespace py = pybind11;

namespace dynatrain::python {

std::unique_ptr<comm::Transport> take_world(PendingWorld& world) {
  if (!world.transport) DT_INPUT_ERROR("this c10d world was given to a Manager already; build one per Manager");
  return std::move(world.transport);
}

namespace {

#if DT_PYTHON_C10D
std::string type_name(const py::handle& obj) { return py::str(py::type::handle_of(obj).attr("__qualname__")); }

// A new owning reference to the C++ object behind a torch pybind11 instance.
template <typename T>
c10::intrusive_ptr<T> owning(const py::handle& obj, const char* want) {
  T* raw = nullptr;
  try {
    raw = obj.cast<T*>();
  } catch (const py::cast_error&) {
    DT_INPUT_ERROR("expected a torch.distributed ", want, ", got a ", type_name(obj),
                   " (or a torch whose pybind11 build differs from this module's)");
  }
  if (raw == nullptr) DT_INPUT_ERROR("expected a torch.distributed ", want, ", got None");
  return c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(raw);
}

PendingWorld c10d_world(const py::handle& group, const py::handle& store, const std::string& prefix,
                        double timeout_seconds) {
  auto pg = owning<c10d::ProcessGroup>(group, "ProcessGroup");
  auto st = owning<c10d::Store>(store, "Store");
  comm::C10dOptions options;
  options.rank = pg->getRank();
  options.size = pg->getSize();
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) options.master_addr = addr;
  options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  py::gil_scoped_release unlocked;  // collective: the transport learns every rank's host
  return PendingWorld{comm::process_group_transport(std::move(pg), std::move(st), prefix, options)};
}

// A connection of this process's own to the job's store, made while the store's host runs (a
// recovery must learn at once, not at a connect's timeout, that the host is gone).
struct StoreConnection {
  std::unique_ptr<comm::KeyStore> store;
};

StoreConnection connect_store(const std::string& address, double timeout_seconds) {
  py::gil_scoped_release unlocked;
  return {
      comm::c10d_connect_store(address, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000)))};
}

// The survivors' agreement after a lost process (job/lost_peer.h, the protocol `dynatrain
// train` runs too): the surviving indices of `places` ((node, pid) per process; index 0, the
// store's host, decides), or None when this process reached it after it was decided without it.
// The store gone: dynatrain.CommError.
std::optional<std::vector<int>> agree_survivors(StoreConnection& connection, const std::string& prefix,
                                                const std::vector<std::pair<std::string, long>>& places, int index,
                                                double deadline_s, double settle_s) {
  std::vector<job::ProcessPlace> where;
  for (const auto& [node, pid] : places) where.push_back({node, pid});
  py::gil_scoped_release unlocked;
  try {
    return job::agree_survivors(*connection.store, prefix, where, index, {deadline_s, settle_s});
  } catch (const job::LeftOutOfAgreement&) {
    return std::nullopt;
  }
}

// The loss watch of an adopted job (job/loss_watch.h): a thread of its own, on a store connection
// of its own, looking at the world's loss mark, its node's processes and the launcher's pipe; raised() is what the
// model's hooks read between modules (python/dynatrain/_stop.py). Not movable: the watch holds
// the flag's address.
struct LossWatchHandle {
  std::atomic<bool> flag{false};
  std::unique_ptr<job::LossWatch> watch;
};

std::unique_ptr<LossWatchHandle> loss_watch(const std::string& address, double timeout_seconds, double period_s) {
  py::gil_scoped_release unlocked;
  auto handle = std::make_unique<LossWatchHandle>();
  handle->watch = std::make_unique<job::LossWatch>(
      comm::c10d_connect_store(address, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000))),
      handle->flag, std::chrono::milliseconds(static_cast<std::int64_t>(period_s * 1000)));
  return handle;
}
#endif

}  // namespace

void bind_c10d(py::module_& m) {
  py::class_<PendingWorld>(m, "C10dWorld");
#if DT_PYTHON_C10D
  m.attr("has_c10d") = true;
  // Collective over `group`: its transport (point to point on slots of its own, collectives on
  // the group's), splitting sub-groups over `store` under keys starting with `prefix`.
  m.def("c10d_world", &c10d_world, py::arg("group"), py::arg("store"), py::arg("prefix"), py::arg("timeout_seconds"));
  py::class_<StoreConnection>(m, "StoreConnection");
  m.def("connect_store", &connect_store, py::arg("address"), py::arg("timeout_seconds"));
  m.def("agree_survivors", &agree_survivors, py::arg("connection"), py::arg("prefix"), py::arg("places"),
        py::arg("index"), py::arg("deadline_s"), py::arg("settle_s"));
  py::class_<LossWatchHandle, std::unique_ptr<LossWatchHandle>>(m, "LossWatch")
      .def(
          "watch",
          [](LossWatchHandle& h, const std::string& key, std::vector<std::string> place_keys) {
            if (h.watch) h.watch->watch(key, std::move(place_keys));
          },
          py::arg("key"), py::arg("place_keys"))
      .def("raised", [](const LossWatchHandle& h) { return h.flag.load(std::memory_order_relaxed); })
      // In a child made by fork(): the watch's thread is not there (only the forking thread is
      // copied), so it is let go without a join; the child never raises.
      .def("forget_in_child", [](LossWatchHandle& h) { (void)h.watch.release(); });
  m.def("loss_watch", &loss_watch, py::arg("address"), py::arg("timeout_seconds"), py::arg("period_s"));
  m.def(
      "announce_place",
      [](StoreConnection& connection, const std::string& prefix, int rank) {
        py::gil_scoped_release unlocked;
        job::announce_place(*connection.store, prefix, rank);
      },
      py::arg("connection"), py::arg("prefix"), py::arg("rank"));
  m.def(
      "raise_loss_mark",
      [](StoreConnection& connection, const std::string& key) {
        py::gil_scoped_release unlocked;
        job::raise_loss_mark(*connection.store, key);
      },
      py::arg("connection"), py::arg("key"));
#else
  m.attr("has_c10d") = false;
  m.def("c10d_world", [](const py::handle&, const py::handle&, const std::string&, double) -> PendingWorld {
    DT_INPUT_ERROR(
        "this build of dynatrain has no torch.distributed transport (comm/c10d needs libtorch and "
        "the Gloo headers at build time); run under mpirun or pass an mpi4py comm=");
  });
#endif
}

}  // namespace dynatrain::python
