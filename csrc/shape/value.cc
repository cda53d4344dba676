// Reading elements of host values handed to native shape functions.
//
// Shape functions receive whatever dtype the model used for begin/end/k/...
// (ONNX uses int64, TVMScript often int32, numpy bools show up in masks), so
// one reader converts them all; each shape function then works in int64.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "shapefn/error.h"
#include "shapefn/shape_func.h"

namespace shapefn {
namespace {

std::string DTypeString(DLDataType t) {
  const char* base = "unknown";
  switch (t.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLBool: base = "bool"; break;
    default: break;
  }
  std::string s = base + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

[[noreturn]] void FailDType(DLDataType t) {
  Fail(ErrorKind::kType, "shape function value of dtype " + DTypeString(t) +
                             " is not supported (expected an integer, bool, float32 or float64 "
                             "scalar type)");
}

// One element, widened without loss to the widest type of its kind.
struct Element {
  enum Kind { kSigned, kUnsigned, kReal } kind;
  int64_t s = 0;
  uint64_t u = 0;
  double f = 0.0;
};

template <typename T>
T Load(const char* p) {
  // memcpy: a byte_offset may leave the element unaligned.
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

const char* ElementAddress(const DLTensor& value, int64_t i) {
  int64_t n = ValueNumel(value);
  if (i < 0 || i >= n) {
    Fail(ErrorKind::kIndex,
         "shape function read element " + std::to_string(i) + " of a value with " + std::to_string(n) + " elements");
  }
  // Sub-byte bools are still stored one per byte by every DLPack producer we
  // accept, hence the round-up.
  int64_t elem_bytes = (static_cast<int64_t>(value.dtype.bits) + 7) / 8;
  int64_t offset = i;
  if (value.strides != nullptr) {
    // Strided views are rare here but cheap to honour: unravel row-major.
    offset = 0;
    int64_t rest = i;
    for (int d = value.ndim - 1; d >= 0; --d) {
      int64_t extent = value.shape[d];
      offset += (rest % extent) * value.strides[d];
      rest /= extent;
    }
  }
  return static_cast<const char*>(value.data) + value.byte_offset + offset * elem_bytes;
}

Element ReadElement(const DLTensor& value, int64_t i) {
  DLDataType t = value.dtype;
  if (t.lanes != 1) FailDType(t);
  Element e{Element::kSigned};
  bool is_bool = t.code == kDLBool || (t.code == kDLUInt && t.bits == 1);
  if (is_bool) {
    if (t.bits != 1 && t.bits != 8) FailDType(t);
    e.s = Load<uint8_t>(ElementAddress(value, i)) != 0 ? 1 : 0;
    return e;
  }
  switch (t.code) {
    case kDLInt:
      switch (t.bits) {
        case 8: e.s = Load<int8_t>(ElementAddress(value, i)); return e;
        case 16: e.s = Load<int16_t>(ElementAddress(value, i)); return e;
        case 32: e.s = Load<int32_t>(ElementAddress(value, i)); return e;
        case 64: e.s = Load<int64_t>(ElementAddress(value, i)); return e;
        default: break;
      }
      break;
    case kDLUInt:
      e.kind = Element::kUnsigned;
      switch (t.bits) {
        case 8: e.u = Load<uint8_t>(ElementAddress(value, i)); return e;
        case 16: e.u = Load<uint16_t>(ElementAddress(value, i)); return e;
        case 32: e.u = Load<uint32_t>(ElementAddress(value, i)); return e;
        case 64: e.u = Load<uint64_t>(ElementAddress(value, i)); return e;
        default: break;
      }
      break;
    case kDLFloat:
      e.kind = Element::kReal;
      switch (t.bits) {
        case 32: e.f = Load<float>(ElementAddress(value, i)); return e;
        case 64: e.f = Load<double>(ElementAddress(value, i)); return e;
        default: break;
      }
      break;
    default: break;
  }
  FailDType(t);
}

}  // namespace

int64_t ValueNumel(const DLTensor& value) {
  int64_t n = 1;
  for (int d = 0; d < value.ndim; ++d) {
    if (value.shape[d] < 0) {
      Fail(ErrorKind::kValue, "shape function value has negative extent " + std::to_string(value.shape[d]));
    }
    if (__builtin_mul_overflow(n, value.shape[d], &n)) {
      Fail(ErrorKind::kValue, "shape function value element count overflows int64");
    }
  }
  return n;
}

int64_t ValueAsInt64(const DLTensor& value, int64_t i) {
  Element e = ReadElement(value, i);
  switch (e.kind) {
    case Element::kSigned: return e.s;
    case Element::kUnsigned:
      if (e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Fail(ErrorKind::kValue, "shape function value " + std::to_string(e.u) + " overflows int64");
      }
      return static_cast<int64_t>(e.u);
    case Element::kReal:
      // Converting NaN or an out-of-range double to int64 is undefined
      // behaviour, so range-check before truncating. 2^63 is exact in double.
      if (!(e.f >= -9223372036854775808.0 && e.f < 9223372036854775808.0)) {
        Fail(ErrorKind::kValue, "shape function value " + std::to_string(e.f) + " is not representable as int64");
      }
      return static_cast<int64_t>(e.f);
  }
  return 0;  // unreachable: every kind returns above
}

double ValueAsDouble(const DLTensor& value, int64_t i) {
  Element e = ReadElement(value, i);
  switch (e.kind) {
    case Element::kSigned: return static_cast<double>(e.s);
    case Element::kUnsigned: return static_cast<double>(e.u);
    case Element::kReal: return e.f;
  }
  return 0.0;  // unreachable
}

}  // namespace shapefn
