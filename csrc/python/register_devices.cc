// Bindings of devices: host, sim, and TVM devices.
#include <pybind11/stl.h>

#include "common.h"
#include "shapefn/device.h"

namespace shapefn::python {

void RegisterDevices(py::module_& m) {
  py::class_<Device, std::shared_ptr<Device>>(m, "Device")
      .def_property_readonly("name", &Device::name)
      .def_property_readonly("is_host", &Device::is_host)
      .def("stats",
           [](const Device& d) {
             CopyEngineStats s = d.stats();
             py::dict out;
             out["d2h_copies"] = s.d2h_copies;
             out["d2h_bytes"] = s.d2h_bytes;
             out["h2d_copies"] = s.h2d_copies;
             out["h2d_bytes"] = s.h2d_bytes;
             out["syncs"] = s.syncs;
             out["modelled_transfer_s"] = s.modelled_transfer_s;
             return out;
           })
      .def("reset_stats", &Device::ResetStats)
      .def("_begin_host_shape_work", &Device::BeginHostShapeWork)
      .def("_end_host_shape_work", &Device::EndHostShapeWork)
      .def("__repr__", [](const Device& d) { return "<shapefn.Device " + d.name() + ">"; });

  m.def("host_device", &HostDevice);
  m.def(
      "sim_device",
      [](double latency_s, double bandwidth, size_t arena_bytes, bool strict, bool realtime) {
        SimConfig c;
        c.latency_s = latency_s;
        c.bandwidth_bytes_per_s = bandwidth;
        c.arena_bytes = arena_bytes;
        c.strict = strict;
        c.realtime = realtime;
        return MakeSimDevice(c);
      },
      py::arg("latency_s"), py::arg("bandwidth_bytes_per_s"), py::arg("arena_bytes"), py::arg("strict"),
      py::arg("realtime"));
  m.def("tvm_device", &MakeTvmDevice);
  m.def("tvm_device_exists", &TvmDeviceExists);
  m.def("_read_byte", [](uintptr_t address) { return ReadByteFromHost(reinterpret_cast<const void*>(address)); });
}

}  // namespace shapefn::python
