// C++ helpers for the Cython call path (shapefn/_vmcall.pyx): small inline
// functions so the .pyx needs no knowledge of C++ enums or move semantics.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

#include "shapefn/error.h"
#include "shapefn/vm.h"

namespace shapefn::vmcall {

inline PyObject* format_error_class = nullptr;
inline PyObject* dependence_error_class = nullptr;

inline void SetErrorClasses(PyObject* format_error, PyObject* dependence_error) {
  Py_XINCREF(format_error);
  Py_XINCREF(dependence_error);
  format_error_class = format_error;
  dependence_error_class = dependence_error;
}

// Called inside a catch block by Cython (`except +TranslateError`): mirrors
// csrc/python/register_errors.cc so both binding layers raise the same types.
inline void TranslateError() {
  try {
    throw;
  } catch (const Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.kind()) {
      case ErrorKind::kValue: type = PyExc_ValueError; break;
      case ErrorKind::kType: type = PyExc_TypeError; break;
      case ErrorKind::kKey: type = PyExc_KeyError; break;
      case ErrorKind::kIndex: type = PyExc_IndexError; break;
      case ErrorKind::kFormat: type = format_error_class ? format_error_class : PyExc_ValueError; break;
      case ErrorKind::kDependence: type = dependence_error_class ? dependence_error_class : PyExc_ValueError; break;
      case ErrorKind::kRuntime: type = PyExc_RuntimeError; break;
      case ErrorKind::kInterrupted: type = PyExc_KeyboardInterrupt; break;
    }
    PyErr_SetString(type, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

inline int KindOf(const Value* v) { return static_cast<int>(v->kind); }
inline int64_t IntOf(const Value* v) { return v->i; }
inline ShapeVec ShapeOfValue(const Value* v) { return v->shape; }
inline TensorRef TensorOfValue(const Value* v) { return v->tensor; }
inline size_t TupleSize(const Value* v) { return v->tuple->size(); }
inline Value* TupleField(const Value* v, size_t i) { return &(*v->tuple)[i]; }

inline Value TensorValue(const TensorRef& t) { return Value::Tensor(t); }

inline TensorRef WrapHost(void* data, int ndim, const int64_t* shape, int code, int bits,
                          void (*release)(void*), void* context) {
  DLTensor t{data, DLDevice{kDLCPU, 0}, ndim, DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1},
             const_cast<int64_t*>(shape), nullptr, 0};
  return WrapHostTensor(t, release, context);
}

inline Value Invoke(uintptr_t vm, int function_index, std::vector<Value>& args) {
  return reinterpret_cast<VirtualMachine*>(vm)->Invoke(function_index, std::move(args));
}

inline Value InvokeProfiled(uintptr_t vm, int function_index, std::vector<Value>& args, uintptr_t profiler) {
  return reinterpret_cast<VirtualMachine*>(vm)->Invoke(function_index, std::move(args),
                                                       reinterpret_cast<Profiler*>(profiler));
}

inline std::string DeviceName(const TensorRef& t) { return t->device()->name(); }
inline bool OnHost(const TensorRef& t) { return t->device()->is_host(); }
inline std::string DTypeName(const TensorRef& t) { return DTypeToString(t->dtype); }
inline void* DataPtr(const TensorRef& t) { return t->data(); }
inline const ShapeVec& TensorShape(const TensorRef& t) { return t->shape; }
inline void ToHost(const TensorRef& t, void* dst) { CopyTensorToHost(*t, dst); }
inline size_t NBytes(const TensorRef& t) { return t->nbytes(); }

}  // namespace shapefn::vmcall
