// Bindings of VirtualMachine construction, counters and the profiler. Calls
// go through the Cython module _vmcall, which takes the VM's address from
// `_address()`.
#include <pybind11/stl.h>

#include "common.h"
#include "shapefn/error.h"
#include "shapefn/vm.h"

namespace shapefn::python {

namespace {

py::dict CountersToDict(const Counters& c) {
  py::dict d;
#define SHAPEFN_COUNTER_TO_DICT(name) d[#name] = c.name;
  SHAPEFN_INT_COUNTERS(SHAPEFN_COUNTER_TO_DICT)
#undef SHAPEFN_COUNTER_TO_DICT
  d["modelled_transfer_s"] = c.modelled_transfer_s;
  return d;
}

py::tuple EventToTuple(const ProfileEvent& e) {
  return py::make_tuple(ProfileCategoryName(e.category), e.track == ProfileTrack::kHost ? "host" : "device",
                        TimeSourceName(e.time_source), e.name, e.device, e.detail, e.start_ns, e.duration_ns,
                        e.measured_ns, e.modelled_ns, e.bytes);
}

}  // namespace

void RegisterVM(py::module_& m) {
  // One profiled call's events; shapefn.runtime.profiler.ProfileReport reads them.
  // The call goes through _vmcall.invoke_profiled with `_address()`.
  py::class_<Profiler, std::shared_ptr<Profiler>>(m, "Profiler")
      .def(py::init<>())
      .def_property_readonly("function", &Profiler::function)
      .def_property_readonly("device", &Profiler::device)
      .def_property_readonly("finished", &Profiler::finished)
      .def("counters", [](const Profiler& p) { return CountersToDict(p.counters()); })
      .def(
          "events",
          [](const Profiler& p) {
            py::list out;
            for (const ProfileEvent& e : p.events()) out.append(EventToTuple(e));
            return out;
          },
          "(category, track, time_source, name, device, detail, start_ns, duration_ns, measured_ns, "
          "modelled_ns, bytes) per event")
      .def("_address", [](Profiler& p) { return reinterpret_cast<uintptr_t>(&p); });

  py::class_<VirtualMachine, std::shared_ptr<VirtualMachine>>(m, "VirtualMachine")
      .def(py::init([](std::shared_ptr<Executable> exe, std::shared_ptr<Device> device, const std::string& dependence,
                       const py::dict& kernels, int64_t max_instructions) {
             VMOptions options;
             if (max_instructions < 0) Fail(ErrorKind::kValue, "max_instructions must be >= 0");
             options.max_instructions = max_instructions;
             if (dependence == "per-input") {
               options.dependence = Dependence::kPerInput;
             } else if (dependence == "per-op") {
               options.dependence = Dependence::kPerOp;
             } else {
               Fail(ErrorKind::kValue, "dependence must be 'per-input' or 'per-op', got '" + dependence + "'");
             }
             std::map<std::string, tvm::ffi::Function> table;
             for (auto kv : kernels) table.emplace(kv.first.cast<std::string>(), FunctionFromPython(kv.second));
             // Uploading constants may wait for another thread's call on a
             // strict sim, which may need the GIL.
             py::gil_scoped_release release;
             return std::make_shared<VirtualMachine>(std::move(exe), std::move(device), options, table);
           }),
           py::arg("executable"), py::arg("device"), py::arg("dependence"), py::arg("kernels"),
           py::arg("max_instructions") = 0)
      // Reading or resetting counters waits for a running call, which may
      // need the GIL (Python kernels, shape-function compiles): release it.
      .def("counters",
           [](const VirtualMachine& vm) {
             Counters c;
             {
               py::gil_scoped_release release;
               c = vm.counters();
             }
             return CountersToDict(c);
           })
      .def("constant_counters", [](const VirtualMachine& vm) { return CountersToDict(vm.constant_counters()); })
      .def("reset_counters", &VirtualMachine::ResetCounters, py::call_guard<py::gil_scoped_release>())
      .def("pool_high_water_bytes", &VirtualMachine::pool_high_water_bytes)
      .def("function_index",
           [](const VirtualMachine& vm, const std::string& name) { return vm.executable().FunctionIndex(name); })
      .def("device", [](const VirtualMachine& vm, int slot) { return vm.device(slot); })
      .def("_address", [](VirtualMachine& vm) { return reinterpret_cast<uintptr_t>(&vm); });
}

}  // namespace shapefn::python
