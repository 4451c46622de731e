// Checkpoints of a python::Manager through ckpt/, in the format `dynatrain train --save` writes:
// the manager's layout with files as its holders (rank files, index, `latest`), plus attachments
// for what Python keeps outside the VPS. Each function is one rank's part of one phase, not
// collective: dynatrain/_checkpoint.py runs the phases on the ranks that take part and raises
// on every rank when one fails. Errors: InputError (ValueError) naming the file and what is wrong.
#include "python/checkpoint_bindings.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "common/error.h"
#include "python/manager.h"
#include "common/clock.h"

namespace py = pybind11;

namespace dynatrain::python {
namespace {

// The manager's buffers, found by (kind, expert group, bucket): a load plans into a layout of
// only the kinds it reads, whose buffer ids differ from the manager's, but not their buckets.
ckpt::Arenas arenas_of(const Manager& mgr) {
  using Key = std::tuple<int, bool, std::int32_t>;
  std::map<Key, std::pair<std::byte*, std::int64_t>> by_key;
  for (const auto& b : mgr.rank_layout().buffers)
    by_key[{static_cast<int>(b.kind), b.expert_group, b.bucket}] = {mgr.buffer(b.id), b.numel};
  ckpt::Arenas a;
  a.buffer = [by_key = std::move(by_key)](const vps::LocalBuffer& b) -> std::byte* {
    const auto it = by_key.find({static_cast<int>(b.kind), b.expert_group, b.bucket});
    return it == by_key.end() || it->second.second != b.numel ? nullptr : it->second.first;
  };
  return a;
}

bool holds(const std::vector<vps::StateKind>& kinds, vps::StateKind k) {
  return std::find(kinds.begin(), kinds.end(), k) != kinds.end();
}

// The checkpoint DIR/latest names, checked against the manager before anything is read into
// it: the same tensors, every kind it holds saved (grads may be absent: they stay zero, as a
// `train --save` checkpoint holds none) with the same element size, a saved config the tensors
// can take.
ckpt::Checkpoint open_for(const Manager& mgr, const std::string& dir) {
  const vps::Layout& here = mgr.layout();
  ckpt::Checkpoint c = ckpt::open_latest(dir, here.tensors(), here.model().name);
  const std::string index = c.step_dir + "/index.json";
  for (vps::StateKind k : here.options().kinds) {
    const int want = here.options().elem_bytes[static_cast<int>(k)];
    if (!holds(c.kinds, k)) {
      if (k == vps::StateKind::kGrad) continue;
      DT_INPUT_ERROR("checkpoint '", index, "' holds no ", vps::state_kind_name(k),
                     " state, which this manager holds (give states= the kinds it holds)");
    }
    if (c.elem_bytes[static_cast<int>(k)] != want)
      DT_INPUT_ERROR("checkpoint '", index, "' holds ", vps::state_kind_name(k), " with ",
                     c.elem_bytes[static_cast<int>(k)], "-byte elements; this manager's are ", want,
                     "-byte (param_dtype must match the saved one)");
  }
  vps::LayoutOptions saved = here.options();
  saved.bucket_elems = c.bucket_elems;
  saved.align_elems = c.align_elems;
  try {
    (void)here.relaid(c.config, saved);
  } catch (const InputError& e) {
    DT_INPUT_ERROR("checkpoint '", index, "' was saved in ", c.config.str(),
                   ", which this model cannot take: ", e.what());
  }
  return c;
}

py::dict load_stats_dict(const ckpt::LoadStats& s, double seconds) {
  using namespace pybind11::literals;
  return py::dict("seconds"_a = seconds, "bytes_read"_a = s.bytes_read, "bytes_loaded"_a = s.bytes_loaded,
                  "read_calls"_a = s.read_calls, "files_opened"_a = s.files_opened);
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<ckpt::Checkpoint>(m, "Checkpoint")
      .def_readonly("step", &ckpt::Checkpoint::step)
      .def_readonly("step_dir", &ckpt::Checkpoint::step_dir)
      .def_property_readonly("config", [](const ckpt::Checkpoint& c) { return c.config.str(); })
      .def_property_readonly("files", [](const ckpt::Checkpoint& c) { return c.files.size(); })
      .def_property_readonly("attachments", [](const ckpt::Checkpoint& c) {
        std::vector<std::string> names;
        for (const auto& a : c.attachments) names.push_back(a.name);
        return names;
      });
  m.def("ckpt_step_dir_name", &ckpt::step_dir_name);
  // Rank 0, before anything is written: InputError for a directory of another model's checkpoint.
  m.def("ckpt_check_target", [](const Manager& mgr, const std::string& dir, std::int64_t step) {
    ckpt::check_save_target(dir, step, mgr.layout());
  });
  m.def("ckpt_begin", &ckpt::begin_save);  // rank 0: the new step directory, empty
  // Every rank: its rank file in `step_dir`, fsync'd; the bytes written (0 outside the layout).
  m.def("ckpt_write_rank", [](const Manager& mgr, const std::string& step_dir) -> std::uint64_t {
    if (mgr.rank() >= mgr.layout().config().world_size()) return 0;
    py::gil_scoped_release unlocked;
    return ckpt::write_rank_file(step_dir, mgr.layout(), mgr.rank(), mgr.layout().options().kinds, arenas_of(mgr));
  });
  // Rank 0, after every rank file: attachments (name, bytes), index, pointer switch.
  m.def("ckpt_commit", [](const Manager& mgr, const std::string& dir, std::int64_t step, const std::string& state,
                          const std::vector<std::pair<std::string, py::bytes>>& files) {
    std::vector<ckpt::Attachment> attachments;
    for (const auto& [name, content] : files) attachments.push_back({name, std::string(content)});
    const nlohmann::json trainer = nlohmann::json::parse(state);
    py::gil_scoped_release unlocked;
    ckpt::commit(dir, step, mgr.layout(), mgr.layout().options().kinds, trainer, attachments);
  });
  m.def("ckpt_open", &open_for);
  // Every rank: its part of the manager's state from the checkpoint (planned from the saved layout).
  m.def("ckpt_load", [](const Manager& mgr, const ckpt::Checkpoint& c) {
    ckpt::LoadStats stats;
    const auto t0 = std::chrono::steady_clock::now();
    {
      py::gil_scoped_release unlocked;
      stats = ckpt::load_rank(c, mgr.layout(), mgr.rank(), arenas_of(mgr));
    }
    return load_stats_dict(stats, seconds_since(t0));
  });
  m.def("ckpt_read_attachment", [](const ckpt::Checkpoint& c, const std::string& name) {
    return py::bytes(ckpt::read_attachment(c.step_dir, c.attachments, name));
  });
}

}  // namespace dynatrain::python
