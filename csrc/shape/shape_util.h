// Small helpers shared by the built-in shape functions.
//
// Every built-in validates the same things (an input's rank, that a value is
// present, that products of extents fit in int64) and reports them the same
// way: a kValue error whose message starts with the op name. Keeping those
// checks here keeps each shape function down to its own rule.
#pragma once

#include <cstdint>
#include <string>

#include "shapefn/error.h"
#include "shapefn/shape_func.h"

namespace shapefn {
namespace shape_util {

[[noreturn]] inline void FailOp(const char* op, const std::string& problem) {
  Fail(ErrorKind::kValue, std::string(op) + ": " + problem);
}

// "(2, 3)", "(5,)", "()" -- the spelling numpy users recognise in messages.
inline std::string ShapeString(const int64_t* dims, int ndim) {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  if (ndim == 1) s += ",";
  return s + ")";
}
inline std::string ShapeString(const ShapeVec& dims) { return ShapeString(dims.data(), static_cast<int>(dims.size())); }
inline std::string ShapeString(const ShapeFuncInput& in) { return ShapeString(in.shape, in.ndim); }

inline int64_t CheckedMul(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    FailOp(op, "shape product " + std::to_string(a) + " * " + std::to_string(b) + " overflows int64");
  }
  return r;
}

inline int64_t CheckedAdd(int64_t a, int64_t b, const char* op) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    FailOp(op, "extent " + std::to_string(a) + " + " + std::to_string(b) + " overflows int64");
  }
  return r;
}

// ShapeFuncInput::numel() trusts its caller; shapes built from user values
// may not deserve that trust.
inline int64_t CheckedNumel(const int64_t* dims, int ndim, const char* op) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n = CheckedMul(n, dims[i], op);
  return n;
}
inline int64_t CheckedNumel(const ShapeFuncInput& in, const char* op) { return CheckedNumel(in.shape, in.ndim, op); }
inline int64_t CheckedNumel(const ShapeVec& dims, const char* op) {
  return CheckedNumel(dims.data(), static_cast<int>(dims.size()), op);
}

// The registry fixes arity from the mask, but a shape function must never
// index past what it was given, whoever called it.
inline void RequireInputs(int num_inputs, int expected, const char* op) {
  if (num_inputs != expected) {
    FailOp(op, "expects " + std::to_string(expected) + " inputs, got " + std::to_string(num_inputs));
  }
}

inline void RequireRank(const ShapeFuncInput& in, int ndim, const char* op, const char* what) {
  if (in.ndim != ndim) {
    FailOp(op, std::string(what) + " must be " + std::to_string(ndim) + "-D, got shape " + ShapeString(in));
  }
}

// The value behind a mask-true input. A null here means the caller broke the
// mask contract; failing beats dereferencing.
inline const DLTensor& ValueOf(const ShapeFuncInput& in, const char* op, const char* what) {
  if (in.value == nullptr) {
    FailOp(op, std::string(what) +
                   " needs a value (its data-dependence flag is true) "
                   "but only a shape was given");
  }
  return *in.value;
}

// DLPack spells bool either as kDLBool or, in older producers, as a 1-bit uint.
inline bool IsBoolDType(DLDataType t) { return t.code == kDLBool || (t.code == kDLUInt && t.bits == 1); }
inline bool IsIntegerDType(DLDataType t) { return (t.code == kDLInt || t.code == kDLUInt) && !IsBoolDType(t); }

// Index-like inputs (begin, newshape, repeats, ...) must be integers: a float
// here almost always means an upstream bug, and silently truncating hides it.
inline void RequireIntegerDType(const DLTensor& value, const char* op, const char* what) {
  if (!IsIntegerDType(value.dtype)) {
    Fail(ErrorKind::kType, std::string(op) + ": " + what + " must have an integer dtype");
  }
}

// A 1-D integer vector value (begin, newshape, ...) read into `out`, whose
// storage is reused. `allow_scalar` accepts a 0-d value as a one-element
// vector where numpy does (np.tile(a, 2)).
inline void ReadIntVector(const ShapeFuncInput& in, const char* op, const char* what, ShapeVec* out,
                          bool allow_scalar = false) {
  const DLTensor& v = ValueOf(in, op, what);
  RequireIntegerDType(v, op, what);
  if (!(v.ndim == 1 || (allow_scalar && v.ndim == 0))) {
    FailOp(op, std::string(what) + " must be 1-D, got shape " + ShapeString(v.shape, v.ndim));
  }
  int64_t n = ValueNumel(v);
  out->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*out)[static_cast<size_t>(i)] = ValueAsInt64(v, i);
}

inline ShapeVec ReadIntVector(const ShapeFuncInput& in, const char* op, const char* what, bool allow_scalar = false) {
  ShapeVec out;
  ReadIntVector(in, op, what, &out, allow_scalar);
  return out;
}

// A scalar operand given either as a 0-d value or a one-element vector
// (ONNX passes `k` of TopK as shape (1,), Relax as a 0-d tensor).
inline const DLTensor& ScalarValueOf(const ShapeFuncInput& in, const char* op, const char* what) {
  const DLTensor& v = ValueOf(in, op, what);
  if (ValueNumel(v) != 1 || v.ndim > 1) {
    FailOp(op,
           std::string(what) + " must be a scalar or a 1-element vector, got shape " + ShapeString(v.shape, v.ndim));
  }
  return v;
}

inline int64_t ReadIntScalar(const ShapeFuncInput& in, const char* op, const char* what) {
  const DLTensor& v = ScalarValueOf(in, op, what);
  RequireIntegerDType(v, op, what);
  return ValueAsInt64(v, 0);
}

// Dims read from values become output extents; a negative one is never valid.
inline void RequireNonNegativeDims(const ShapeVec& dims, const char* op, const char* what) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      FailOp(op, std::string(what) + "[" + std::to_string(i) + "] is " + std::to_string(dims[i]) +
                     ", dims must be non-negative");
    }
  }
}

// Python-style axis (negative counts from the end) -> [0, ndim).
inline int NormalizeAxis(int64_t axis, int ndim, const char* op) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) {
    FailOp(op, "axis " + std::to_string(axis) + " is out of range for a " + std::to_string(ndim) + "-D input");
  }
  return static_cast<int>(a);
}

}  // namespace shape_util
}  // namespace shapefn
