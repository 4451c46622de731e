#include "python/lease_bindings.h"

namespace py = pybind11;

namespace dynatrain::python {
namespace {

struct BufferLease {
  std::shared_ptr<Manager> owner;  // declared first: destroyed after the pin
  std::shared_ptr<void> pin;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
};

}  // namespace

void bind_leases(py::module_& m) {
  py::class_<BufferLease>(m, "BufferLease", py::buffer_protocol())
      .def_buffer([](BufferLease& l) {
        return py::buffer_info(l.data, 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(l.bytes)}, {1});
      })
      .def_property_readonly("nbytes", [](const BufferLease& l) { return l.bytes; });
}

py::object buffer_lease(const std::shared_ptr<Manager>& manager, std::size_t i) {
  if (!manager->buffer(i)) return py::none();
  return py::cast(BufferLease{manager, manager->pin(i), manager->buffer(i), manager->buffer_bytes(i)});
}

py::object copy_lease(const std::shared_ptr<Manager>& manager, std::size_t c, std::size_t i) {
  std::byte* data = manager->copies().at(c).buffers.at(i);
  if (!data) return py::none();
  return py::cast(BufferLease{manager, manager->pin_copy(c, i), data, manager->copy_buffer_bytes(c, i)});
}

}  // namespace dynatrain::python
