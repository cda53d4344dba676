// Bindings of VirtualMachine construction and counters. Calls go through the
// Cython module _vmcall, which takes the VM's address from `_address()`.
#include <pybind11/stl.h>

#include "common.h"
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

}  // namespace

void RegisterVM(py::module_& m) {
  py::class_<VirtualMachine, std::shared_ptr<VirtualMachine>>(m, "VirtualMachine")
      .def(py::init([](std::shared_ptr<Executable> exe, std::shared_ptr<Device> device, const std::string& dependence,
                       const py::dict& kernels, int64_t max_instructions) {
             VMOptions options;
             if (max_instructions < 0) throw py::value_error("max_instructions must be >= 0");
             options.max_instructions = max_instructions;
             if (dependence == "per-input") {
               options.dependence = Dependence::kPerInput;
             } else if (dependence == "per-op") {
               options.dependence = Dependence::kPerOp;
             } else {
               throw py::value_error("dependence must be 'per-input' or 'per-op', got '" + dependence + "'");
             }
             std::map<std::string, tvm::ffi::Function> table;
             for (auto kv : kernels) table.emplace(kv.first.cast<std::string>(), FunctionFromPython(kv.second));
             return std::make_shared<VirtualMachine>(std::move(exe), std::move(device), options, table);
           }),
           py::arg("executable"), py::arg("device"), py::arg("dependence"), py::arg("kernels"),
           py::arg("max_instructions") = 0)
      .def("counters", [](const VirtualMachine& vm) { return CountersToDict(vm.counters()); })
      .def("constant_counters", [](const VirtualMachine& vm) { return CountersToDict(vm.constant_counters()); })
      .def("reset_counters", &VirtualMachine::ResetCounters)
      .def("pool_high_water_bytes", &VirtualMachine::pool_high_water_bytes)
      .def("function_index", [](const VirtualMachine& vm, const std::string& name) {
        return vm.executable().FunctionIndex(name);
      })
      .def("device", [](const VirtualMachine& vm, int slot) { return vm.device(slot); })
      .def("_address", [](VirtualMachine& vm) { return reinterpret_cast<uintptr_t>(&vm); });
}

}  // namespace shapefn::python
