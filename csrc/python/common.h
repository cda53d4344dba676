// Shared by the pybind11 binding files: handles from tvm-ffi's Python objects.
#pragma once

#include <pybind11/pybind11.h>
#include <tvm/ffi/function.h>

#include <cstdint>

namespace shapefn::python {

namespace py = pybind11;

// A tvm_ffi.Function from its C handle (`f.__chandle__()`); takes a reference.
inline tvm::ffi::Function FunctionFromHandle(uintptr_t handle) {
  TVMFFIAny any;
  any.type_index = kTVMFFIFunction;
  any.zero_padding = 0;
  any.v_obj = reinterpret_cast<TVMFFIObject*>(handle);
  return tvm::ffi::AnyView::CopyFromTVMFFIAny(any).cast<tvm::ffi::Function>();
}

// A tvm_ffi.Function object on the Python side.
inline tvm::ffi::Function FunctionFromPython(const py::handle& f) {
  return FunctionFromHandle(f.attr("__chandle__")().cast<uintptr_t>());
}

void RegisterErrors(py::module_& m);
void RegisterRegistry(py::module_& m);
void RegisterDevices(py::module_& m);
void RegisterExecutable(py::module_& m);
void RegisterVM(py::module_& m);

}  // namespace shapefn::python
