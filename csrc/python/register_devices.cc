// Bindings of devices: host, sim, OpenCL and TVM devices.
#include <pybind11/stl.h>

#include "common.h"
#include "shapefn/device.h"
#include "shapefn/device_slot.h"
#include "shapefn/opencl.h"

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

  m.def("make_device", &MakeDevice, "The device a name gives (shapefn::MakeDevice).");
  m.def("load_cuda_runtime", &LoadCudaRuntime, "Loads TVM's CUDA runtime (shapefn::LoadCudaRuntime).");
  m.def(
      "parse_device_name",
      [](const std::string& name) {
        DeviceName parsed = ParseDeviceName(name);
        return py::make_tuple(parsed.kind, parsed.index);
      },
      "(kind, index) of a device name (shapefn::ParseDeviceName).");
  m.def(
      "device_slots",
      [] {
        py::dict slots;
#define SHAPEFN_DEVICE_SLOT_ITEM(constant, value, name) slots[name] = value;
        SHAPEFN_DEVICE_SLOTS(SHAPEFN_DEVICE_SLOT_ITEM)
#undef SHAPEFN_DEVICE_SLOT_ITEM
        return slots;
      },
      "Device slot numbers by name (shapefn/device_slot.h).");
  // The slots Python code names: placement's answers and the builder's defaults.
  m.attr("host_slot") = DeviceSlotName(kHostSlot);
  m.attr("execution_slot") = DeviceSlotName(kExecutionSlot);
  m.def(
      "sim_defaults",
      [] {
        SimConfig c;
        py::dict out;
        out["latency_s"] = c.latency_s;
        out["bandwidth_bytes_per_s"] = c.bandwidth_bytes_per_s;
        out["arena_bytes"] = c.arena_bytes;
        return out;
      },
      "The default cost model and arena size of the sim device (shapefn::SimConfig).");
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
  m.def("opencl_unavailable_reason", &OpenCLUnavailableReason);
  m.def("opencl_devices", [] {
    py::list out;
    for (const OpenCLDeviceInfo& d : OpenCLDevices()) {
      py::dict info;
      info["name"] = OpenCLDeviceName(d.index);
      info["device"] = d.name;
      info["type"] = d.type;
      info["vendor"] = d.vendor;
      info["version"] = d.version;
      info["driver_version"] = d.driver_version;
      info["platform"] = d.platform;
      info["platform_vendor"] = d.platform_vendor;
      info["platform_version"] = d.platform_version;
      info["compute_units"] = d.compute_units;
      info["max_clock_mhz"] = d.max_clock_mhz;
      info["max_work_group_size"] = d.max_work_group_size;
      info["global_mem_bytes"] = d.global_mem_bytes;
      info["local_mem_bytes"] = d.local_mem_bytes;
      info["max_alloc_bytes"] = d.max_alloc_bytes;
      info["sub_buffer_alignment"] = d.sub_buffer_alignment;
      info["available"] = d.available;
      out.append(info);
    }
    return out;
  });
  m.def("opencl_counts", [](int index) {
    OpenCLDeviceCounts c = OpenCLCounts(index);
    py::dict out;
    out["d2h_copies"] = c.d2h_copies;
    out["d2h_bytes"] = c.d2h_bytes;
    out["h2d_copies"] = c.h2d_copies;
    out["h2d_bytes"] = c.h2d_bytes;
    out["d2d_copies"] = c.d2d_copies;
    out["d2d_bytes"] = c.d2d_bytes;
    out["syncs"] = c.syncs;
    out["kernel_launches"] = c.kernel_launches;
    out["allocations"] = c.allocations;
    return out;
  });
  m.def("reset_opencl_counts", &ResetOpenCLCounts);
  m.def("tvm_device_exists", &TvmDeviceExists);
  m.def("_read_byte", [](uintptr_t address) { return ReadByteFromHost(reinterpret_cast<const void*>(address)); });
}

}  // namespace shapefn::python
