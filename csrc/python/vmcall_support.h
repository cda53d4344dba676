// C++ helpers for the Cython call path (shapefn/_vmcall.pyx): small inline
// functions so the .pyx needs no knowledge of C++ members or move semantics.
// Errors go through errors.h, as for the pybind11 bindings.
#pragma once

#include <Python.h>

#include <string>
#include <vector>

#include "shapefn/vm.h"

namespace shapefn::vmcall {

inline Value::Kind KindOf(const Value* v) { return v->kind; }
inline int64_t IntOf(const Value* v) { return v->i; }
inline ShapeVec ShapeOfValue(const Value* v) { return v->shape; }
inline TensorRef TensorOfValue(const Value* v) { return v->tensor; }
inline size_t TupleSize(const Value* v) { return v->tuple->size(); }
inline Value* TupleField(const Value* v, size_t i) { return &(*v->tuple)[i]; }

inline Value TensorValue(const TensorRef& t) { return Value::Tensor(t); }

inline TensorRef WrapHost(void* data, int ndim, const int64_t* shape, int code, int bits, void (*release)(void*),
                          void* context) {
  DLTensor t{data,
             DLDevice{kDLCPU, 0},
             ndim,
             DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1},
             const_cast<int64_t*>(shape),
             nullptr,
             0};
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
inline std::string DTypeName(const TensorRef& t) { return DTypeToString(t->dtype); }
inline void* DataPtr(const TensorRef& t) { return t->data(); }
inline const ShapeVec& TensorShape(const TensorRef& t) { return t->shape; }
inline void ToHost(const TensorRef& t, void* dst) { CopyTensorToHost(*t, dst); }
inline size_t NBytes(const TensorRef& t) { return t->nbytes(); }

}  // namespace shapefn::vmcall
