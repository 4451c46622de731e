// dynatrain._native: the pybind11 side of the Python module. Python objects in, library calls,
// plain Python values out; dynatrain/__init__.py turns buffers into torch tensors and
// communicator colors into mpi4py communicators. Errors: InputError -> ValueError,
// CommError -> dynatrain.CommError (a RuntimeError), InvariantError -> dynatrain.InternalError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "comm/mpi/mpi_transport.h"
#include "common/error.h"
#include "plan/checker.h"
#include "plan/planner.h"
#include "plan/stats.h"
#include "python/c10d_bindings.h"
#include "python/checkpoint_bindings.h"
#include "python/lease_bindings.h"
#include "python/bindings.h"
#include "python/elastic.h"
#include "python/manager.h"
#include "vps/state_kind.h"

namespace py = pybind11;

namespace dynatrain::python {
namespace {

template <typename Enum, std::size_t N>
Enum parse_enum(const std::string& what, const std::string& tensor, const std::string& value,
                const std::array<std::pair<const char*, Enum>, N>& names) {
  std::string valid;
  for (const auto& [name, e] : names) {
    if (value == name) return e;
    valid += valid.empty() ? name : std::string(", ") + name;
  }
  DT_INPUT_ERROR("tensor '", tensor, "': unknown ", what, " '", value, "'; valid: ", valid);
}

// A dynatrain.Tensor (duck-typed: name, shape, split, dim, stage, layer, expert, also_on_last_stage).
vps::TensorSpec tensor_from_python(const py::handle& t) {
  vps::TensorSpec s;
  s.name = py::str(t.attr("name"));
  s.shape = t.attr("shape").cast<std::vector<std::int64_t>>();
  s.split = parse_enum<vps::TpSplit, 3>(
      "split", s.name, py::str(t.attr("split")),
      {{{"replicated", vps::TpSplit::kReplicated}, {"dim", vps::TpSplit::kDim}, {"vocab", vps::TpSplit::kVocab}}});
  const int dim = t.attr("dim").cast<int>();
  if (dim < 0 || dim >= vps::kMaxDims)
    DT_INPUT_ERROR("tensor '", s.name, "': split dim ", dim, " is outside 0..", vps::kMaxDims - 1);
  s.split_dim = static_cast<std::uint8_t>(dim);
  s.stage = parse_enum<vps::Stage, 3>(
      "stage", s.name, py::str(t.attr("stage")),
      {{{"pre", vps::Stage::kPre}, {"layer", vps::Stage::kLayer}, {"post", vps::Stage::kPost}}});
  s.layer = t.attr("layer").cast<std::int64_t>();
  s.expert = t.attr("expert").cast<bool>();
  s.also_on_last_stage = t.attr("also_on_last_stage").cast<bool>();
  return s;
}

// `model`: a preset name or config.json path (str), or a dynatrain.Model (name, layers,
// vocab_divisible_by, tensors).
LayoutFactory layouts_from_python(const py::object& model, const vps::LayoutOptions& options) {
  if (py::isinstance<py::str>(model)) return model_layouts(vps::model_from_name(model.cast<std::string>()), options);
  vps::ModelSpec spec;
  spec.name = py::str(model.attr("name"));
  spec.layers = model.attr("layers").cast<std::int64_t>();
  spec.vocab_divisible_by = model.attr("vocab_divisible_by").cast<std::int64_t>();
  if (spec.vocab_divisible_by < 1)
    DT_INPUT_ERROR("model '", spec.name, "': vocab_divisible_by=", spec.vocab_divisible_by, " must be positive");
  std::vector<vps::TensorSpec> tensors;
  for (const auto& t : model.attr("tensors")) tensors.push_back(tensor_from_python(t));
  return tensor_list_layouts(std::move(tensors), std::move(spec), options);
}

vps::LayoutOptions layout_options(const std::string& states, std::int64_t bucket_elems, int param_bytes,
                                  bool align_pages = false) {
  vps::LayoutOptions o;
  if (align_pages) o.align_elems = vps::kPageAlignElems;
  o.kinds = vps::parse_state_kinds(states);
  o.bucket_elems = bucket_elems;
  if (param_bytes != 2 && param_bytes != 4)
    DT_INPUT_ERROR("param element size ", param_bytes, " bytes; valid: 2 (bfloat16), 4 (float32)");
  o.elem_bytes[static_cast<int>(vps::StateKind::kParam)] = param_bytes;
  o.elem_bytes[static_cast<int>(vps::StateKind::kGrad)] = param_bytes;
  return o;
}

// The bytes of state `rank` holds in `config` (its buffers), computed from the layout without
// allocating: the Manager's up-front memory check (python/dynatrain/__init__.py).
std::uint64_t rank_state_bytes(const py::object& model, const std::string& config, const std::string& states,
                               std::int64_t bucket_elems, int param_bytes, int rank) {
  const auto options = layout_options(states, bucket_elems, param_bytes);
  const vps::Layout layout = layouts_from_python(model, options)(vps::ParallelConfig::parse(config));
  std::uint64_t bytes = 0;
  for (const auto& b : layout.rank_layout(rank).buffers)
    bytes += static_cast<std::uint64_t>(b.numel) * options.elem_bytes[static_cast<int>(b.kind)];
  return bytes;
}

// The statistics of `dynatrain plan --json` (tools/plan_command.cc), as a JSON string.
std::string plan_json(const py::object& model, const std::string& from, const std::string& to, int gpus_per_node,
                      const std::string& states, std::int64_t bucket_elems, bool check, double intra_gbps,
                      double inter_gbps) {
  const auto options = layout_options(states, bucket_elems, 2);
  const LayoutFactory layouts = layouts_from_python(model, options);
  const vps::Layout src = layouts(vps::ParallelConfig::parse(from));
  const vps::Layout dst = layouts(vps::ParallelConfig::parse(to));
  py::gil_scoped_release unlocked;
  const plan::Planner planner(src, dst, plan::Topology{gpus_per_node});
  const auto [plans, plan_seconds, rank_seconds] = plan::plan_timed(planner);
  const plan::Bandwidth bw{intra_gbps * 1e9, inter_gbps * 1e9};
  nlohmann::json j =
      plan::stats_json(plan::compute_stats(plans, options.elem_bytes, planner.topology(), bw), options.kinds);
  j["model"] = src.model().name;
  j["from"] = src.config().str();
  j["to"] = dst.config().str();
  j["gpus_per_node"] = gpus_per_node;
  j["plan_seconds"] = plan_seconds;
  j["rank_plan_seconds"] = rank_seconds;
  j["check"] = "skipped";
  j["check_seconds"] = 0.0;
  if (check) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto result = plan::check_plan(src, dst, plans);
    j["check_seconds"] = seconds_since(t0);
    j["check"] = result.ok ? std::string("ok") : result.violation;
  }
  return j.dump();
}

std::unique_ptr<comm::Transport> transport_from_fortran_handle(std::int64_t handle) {
  comm::MpiSession::init();  // MPI is up (mpi4py); checks MPI_THREAD_MULTIPLE
  MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  if (comm == MPI_COMM_NULL) DT_INPUT_ERROR("the communicator is MPI.COMM_NULL");
  return comm::MpiTransport::from_comm(comm);
}

}  // namespace

py::dict stats_dict(const SwitchStats& s) {
  py::dict d;
  d["seconds"] = s.pause_seconds;
  d["plan_seconds"] = s.plan_seconds;
  d["engine_seconds"] = s.engine_seconds;
  d["bytes_sent"] = s.bytes_sent;
  d["max_rank_bytes_received"] = s.max_rank_bytes_received;
  d["max_rank_bytes_zeroed"] = s.max_rank_bytes_zeroed;
  d["bytes_kept"] = s.bytes_kept;
  d["messages"] = s.messages;
  d["peak_bytes"] = s.peak_bytes;
  d["max_src_bytes"] = s.max_src_bytes;
  d["max_dst_bytes"] = s.max_dst_bytes;
  // the engine's parts, each the slowest rank's (SwitchStats)
  d["agree_seconds"] = s.agree_seconds;
  d["dry_seconds"] = s.dry_seconds;
  d["alloc_seconds"] = s.alloc_seconds;
  d["pack_seconds"] = s.pack_seconds;
  d["unpack_seconds"] = s.unpack_seconds;
  d["keep_seconds"] = s.keep_seconds;
  d["wait_seconds"] = s.wait_seconds;
  d["system_seconds"] = s.system_seconds;
  d["page_faults"] = s.page_faults;
  d["kept_zero_copy_bytes"] = s.kept_zero_copy_bytes;
  d["kept_remapped_bytes"] = s.kept_remapped_bytes;
  d["committed_ahead_bytes"] = s.committed_ahead_bytes;
  d["keep_path"] = s.keep_path;
  d["plan_cached"] = s.plan_cached;
  return d;
}

namespace {

// Sub-communicator colors and keys of this rank in the current config: name -> (color, key),
// color -1 where the rank is outside the config. Ranks with equal colors form one group.
py::dict group_colors(const vps::ParallelConfig& c, int rank) {
  const vps::RankCoords r = vps::rank_coords(c, rank);
  const int stage_ranks = c.tp * c.cp * c.dp, base = r.pp * stage_ranks;
  const std::array<std::tuple<const char*, int, int>, 8> groups{{
      {"tp", vps::rank_of(c, 0, r.cp, r.dp, r.pp), r.tp},
      {"cp", vps::rank_of(c, r.tp, 0, r.dp, r.pp), r.cp},
      {"dp", vps::rank_of(c, r.tp, r.cp, 0, r.pp), r.dp},
      {"dp_cp", vps::rank_of(c, r.tp, 0, 0, r.pp), r.dense_shard},
      {"pp", vps::rank_of(c, r.tp, r.cp, r.dp, 0), r.pp},
      {"ep", base + r.etp + c.etp * c.ep * r.edp, r.ep},
      {"etp", base + c.etp * (r.ep + c.ep * r.edp), r.etp},
      {"edp", base + r.etp + c.etp * r.ep, r.edp},
  }};
  py::dict d;
  for (const auto& [name, color, key] : groups) d[name] = py::make_tuple(r.active ? color : -1, key);
  return d;
}

py::dict config_dict(const vps::ParallelConfig& c, int rank) {
  const vps::RankCoords r = vps::rank_coords(c, rank);
  py::dict d;
  d["config"] = c.str();
  d["world_size"] = c.world_size();
  d["active"] = r.active;
  for (const auto& [name, size, coord] : std::array<std::tuple<const char*, int, int>, 7>{{{"tp", c.tp, r.tp},
                                                                                           {"cp", c.cp, r.cp},
                                                                                           {"dp", c.dp, r.dp},
                                                                                           {"pp", c.pp, r.pp},
                                                                                           {"ep", c.ep, r.ep},
                                                                                           {"etp", c.etp, r.etp},
                                                                                           {"edp", c.edp(), r.edp}}}) {
    d[name] = size;
    d[(std::string(name) + "_rank").c_str()] = coord;
  }
  d["zero"] = c.zero;
  return d;
}

using ManagerClass = py::class_<Manager, std::shared_ptr<Manager>>;

// Manager(comm, model, config, ...): builds the layouts and the first layout's buffers.
void bind_manager_init(ManagerClass& cls) {
  cls
      // `comm`: an MPI communicator's Fortran handle, a c10d_world() (c10d_bindings.h), or the
      // job a grow started this process for (join_job(); `config` is then the job's current layout).
      .def(py::init([](const py::object& comm, const py::object& model, const std::string& config,
                       const std::string& states, std::int64_t bucket_elems, int param_bytes, std::uint64_t mem_budget,
                       int gpus_per_node, bool align_pages, bool prefault) {
             exec::TransitionOptions t;
             t.mem_budget = mem_budget;
             t.topology.gpus_per_node = gpus_per_node;
             auto layouts = layouts_from_python(model, layout_options(states, bucket_elems, param_bytes, align_pages));
             auto first = vps::ParallelConfig::parse(config);
             if (py::isinstance<Elastic>(comm))
               return std::make_shared<Manager>(comm.cast<std::shared_ptr<Elastic>>(), std::move(layouts), first, t);
             auto world = py::isinstance<PendingWorld>(comm) ? take_world(comm.cast<PendingWorld&>())
                                                             : transport_from_fortran_handle(comm.cast<std::int64_t>());
             py::gil_scoped_release unlocked;
             return std::make_shared<Manager>(std::move(world), std::move(layouts), first, t, prefault);
           }),
           py::arg("comm"), py::arg("model"), py::arg("config"), py::arg("states"), py::arg("bucket_elems"),
           py::arg("param_bytes"), py::arg("mem_budget"), py::arg("gpus_per_node"),
           // A pool prefaulted at construction (python/manager.h): on unless switched off.
           // Page-aligned tensors (kept tensors at new offsets remapped, not copied) only when
           // asked: dynatrain.plan() and `dynatrain plan` describe packed layouts, and a
           // Manager moves exactly the bytes they plan (tests/python).
           py::arg("align_pages") = false, py::arg("prefault") = true);
}

// Switching the layout: switch(), validate() and a timed switch for the benchmark.
void bind_manager_switch(ManagerClass& cls) {
  cls.def(
         "switch",
         [](Manager& self, const std::string& to, bool zero_grads, bool fill_grads) {
           auto config = vps::ParallelConfig::parse(to);
           SwitchStats s;
           {
             py::gil_scoped_release unlocked;
             s = self.switch_to(config, zero_grads ? exec::kStepBoundaryKinds : 0u, fill_grads);
           }
           return stats_dict(s);
         },
         // zero_grads: the grads are not moved and are zero afterwards (a step boundary);
         // fill_grads=False with it: left unset instead, for a caller that zeroes them first
         py::arg("to"), py::arg("zero_grads") = false, py::arg("fill_grads") = true)
      .def("validate",
           [](const Manager& self, const std::string& to) { self.validate(vps::ParallelConfig::parse(to)); })
      // The same switch driven from C++ alone (no Python between plan, engine and stats), timed
      // between barriers; max over ranks. For bench/python_switch_bench.py's reference figure.
      .def("timed_switch", [](Manager& self, const std::string& to) {
        auto config = vps::ParallelConfig::parse(to);
        py::gil_scoped_release unlocked;
        self.world().barrier();
        const auto t0 = std::chrono::steady_clock::now();
        self.switch_to(config);
        const double mine = seconds_since(t0);
        double slowest = 0;
        for (double s : comm::all_gather_values(self.world(), mine)) slowest = std::max(slowest, s);
        return slowest;
      });
}

// A weights-only copy (python/refit.cc): receive the training manager's weights, or let them go.
void bind_manager_refit(ManagerClass& cls) {
  cls.def("receive_weights",
          [](Manager& self, const std::shared_ptr<Manager>& training, const std::vector<int>& members) {
            SwitchStats s;
            {
              py::gil_scoped_release unlocked;
              s = self.receive_weights(training, members);
            }
            return stats_dict(s);
          })
      .def("release_weights", &Manager::release_weights);
}

// The current layout: its config, group colors, model, tensors and state kinds.
void bind_manager_layout(ManagerClass& cls) {
  cls.def("config", [](const Manager& self) { return config_dict(self.layout().config(), self.rank()); })
      .def("group_colors", [](const Manager& self) { return group_colors(self.layout().config(), self.rank()); })
      // Every rank's colors, computed here (a pure function of the config): no gather needed.
      .def("all_group_colors",
           [](const Manager& self) {
             py::list out;
             for (int r = 0; r < self.size(); ++r) out.append(group_colors(self.layout().config(), r));
             return out;
           })
      .def("model_name", [](const Manager& self) { return self.layout().model().name; })
      .def("tensor_names",
           [](const Manager& self) {
             std::vector<std::string> names;
             for (const auto& t : self.layout().tensors()) names.push_back(t.name);
             return names;
           })
      .def("tensor_shapes",
           [](const Manager& self) {
             std::vector<std::vector<std::int64_t>> shapes;
             for (const auto& t : self.layout().tensors()) shapes.push_back(t.shape);
             return shapes;
           })
      .def("kinds", [](const Manager& self) {
        std::vector<std::string> names;
        for (auto k : self.layout().options().kinds) names.push_back(vps::state_kind_name(k));
        return names;
      });
}

// Spare pages made resident ahead (python/manager.h, Manager::prefault): a process about to receive state.
void bind_manager_prefault(ManagerClass& cls) {
  cls.def(
      "prefault",
      [](Manager& self, std::size_t bytes) {
        py::gil_scoped_release unlocked;
        return self.prefault(bytes);
      },
      py::arg("bytes"));
}

// This rank's memory: buffers, views into them, ZeRO buckets, segments and pool figures.
void bind_manager_memory(ManagerClass& cls) {
  cls
      // (BufferLease or None, kind, element bytes, numel) per buffer, in buffer id order. A lease
      // keeps the manager and the buffer's memory alive (lease_bindings.h); its bytes belong to
      // the current layout only until switch().
      .def("buffers",
           [](const std::shared_ptr<Manager>& self) {
             py::list out;
             const auto& rl = self->rank_layout();
             for (std::size_t i = 0; i < rl.buffers.size(); ++i) {
               const auto kind = rl.buffers[i].kind;
               const int elem = self->layout().options().elem_bytes[static_cast<int>(kind)];
               out.append(py::make_tuple(buffer_lease(self, i), vps::state_kind_name(kind), elem, rl.buffers[i].numel));
             }
             return out;
           })
      // (tensor id, kind, buffer, offset, length, start, sharded, local shape) per local tensor and kind.
      .def("views",
           [](const Manager& self) {
             py::list out;
             for (const auto& v : self.views())
               out.append(py::make_tuple(v.tensor, vps::state_kind_name(v.kind), v.buffer, v.offset, v.length, v.start,
                                         v.sharded, v.local_shape));
             return out;
           })
      // (tensor id, expert, bucket, offset, numel) per local tensor: its elements lie at
      // [offset, offset + numel) of the whole (unsharded) bucket, whichever kinds are sharded.
      .def("placements",
           [](const Manager& self) {
             py::list out;
             for (const vps::LocalShard& s : self.layout().local_shards(self.rank()))
               out.append(py::make_tuple(s.tensor, s.expert_group, s.bucket, s.offset, s.numel));
             return out;
           })
      .def("buckets",
           [](const Manager& self) {
             py::list out;
             for (const auto& b : self.buckets()) {
               py::dict d;
               d["expert"] = b.expert;
               d["bucket"] = b.bucket;
               d["bucket_numel"] = b.bucket_numel;
               d["shard_lo"] = b.shard_lo;
               d["shard_hi"] = b.shard_hi;
               py::dict ids;
               for (int k = 0; k < vps::kNumStateKinds; ++k)
                 if (b.buffers[k] >= 0) ids[vps::state_kind_name(static_cast<vps::StateKind>(k))] = b.buffers[k];
               d["buffers"] = ids;
               out.append(d);
             }
             return out;
           })
      // (tensor id, kind, buffer, offset, lo, hi) per segment: box [lo, hi) of the tensor stored
      // dense row-major at `offset` elements into the buffer (for content checks and gathers).
      .def("segments", [](const Manager& self) {
        py::list out;
        for (const auto& b : self.rank_layout().buffers)
          for (const auto& s : b.segments)
            out.append(py::make_tuple(s.tensor, vps::state_kind_name(b.kind), b.id, s.offset,
                                      std::vector<std::int64_t>(s.box.lo.begin(), s.box.lo.begin() + s.box.ndim),
                                      std::vector<std::int64_t>(s.box.hi.begin(), s.box.hi.begin() + s.box.ndim)));
        return out;
      });
}

void bind_manager_pool(ManagerClass& cls) {
  cls
      // What pool_stats() reports as deferred_bytes, without reading /proc/self/smaps (the
      // huge-page figure there costs about 12 ms a call): checked after every switch.
      .def("deferred_bytes", [](const Manager& self) { return self.keep_alive().deferred_bytes(); })
      .def("pool_stats", [](const Manager& self) {
        py::dict d;
        d["live_bytes"] = self.pool().live_bytes();
        d["reserved_bytes"] = self.pool().reserved_bytes();
        d["peak_live_bytes"] = self.pool().peak_live();          // the most live at once so far
        d["peak_reserved_bytes"] = self.pool().peak_reserved();  // ... and held (2 MiB rounding, spare pages)
        d["fresh_bytes"] = self.pool().fresh_bytes();
        d["pinned_buffers"] = self.keep_alive().pinned_blocks();
        d["deferred_bytes"] = self.keep_alive().deferred_bytes();
        d["huge_pages"] = self.pool().huge_pages();  // the pool's HugePages::kAuto, on where THP allows
        d["thp_mode"] = exec::thp_mode_name(exec::thp_mode());
        d["mapped_bytes"] = self.pool().mapped_block_bytes();
        d["huge_page_bytes"] = self.pool().huge_page_bytes();  // of those, in 2 MiB pages (smaps)
        return d;
      });
}

void bind_manager(py::module_& m) {
  ManagerClass cls(m, "Manager");
  bind_manager_init(cls);
  bind_manager_switch(cls);
  bind_manager_refit(cls);
  bind_manager_layout(cls);
  bind_manager_memory(cls);
  bind_manager_pool(cls);
  bind_manager_prefault(cls);
}

}  // namespace
}  // namespace dynatrain::python

PYBIND11_MODULE(_native, m) {
  using namespace dynatrain;
  m.doc() = "DynaTrain's native core; use the dynatrain package, not this module";
  static py::exception<CommError> comm_error(m, "CommError", PyExc_RuntimeError);
  static py::exception<InvariantError> internal_error(m, "InternalError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const CommError& e) {
      comm_error(e.what());
    } catch (const InvariantError& e) {
      internal_error(e.what());
    }
  });
  m.def("plan", &python::plan_json, py::arg("model"), py::arg("from_cfg"), py::arg("to_cfg"), py::arg("gpus_per_node"),
        py::arg("states"), py::arg("bucket_elems"), py::arg("check"), py::arg("intra_bw"), py::arg("inter_bw"));
  m.def("rank_state_bytes", &python::rank_state_bytes, py::arg("model"), py::arg("config"), py::arg("states"),
        py::arg("bucket_elems"), py::arg("param_bytes"), py::arg("rank"));
  m.def("preset_names", &vps::preset_names);
  // The state kinds in StateKind order, from the one table (vps/state_kind.h).
  m.def("state_kinds", [] {
    std::vector<std::string> names;
    for (const auto& k : vps::kStateKinds) names.emplace_back(k.name);
    return names;
  });
  python::bind_manager(m);
  python::bind_checkpoint(m);
  python::bind_leases(m);
  python::bind_elastic(m);
  python::bind_c10d(m);
}
