// Native host shape functions: the interface every built-in implements.
//
// A shape function sees each input's shape and dtype. It sees an input's
// *value* only where the op's data-dependence mask is true; there `value`
// points at host memory (the VM copied it from the device if it had to).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

#include "shapefn/error.h"

namespace shapefn {

using ShapeVec = std::vector<int64_t>;

struct ShapeFuncInput {
  const int64_t* shape;
  int ndim;
  DLDataType dtype;
  // Host-resident value where the mask is true, nullptr where it is false.
  const DLTensor* value;

  int64_t dim(int axis) const { return shape[axis]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

// Integer attributes of the op (axis, layout code, ...), fixed at compile time.
struct ShapeFuncAttrs {
  const int64_t* data = nullptr;
  int size = 0;
  int64_t get(int i, int64_t fallback) const { return i < size ? data[i] : fallback; }
};

// Writes the shape of op output j into outputs[j], for each of the op's
// registered outputs. The caller owns the vectors and hands them over empty,
// with the storage of earlier calls kept: a shape function that fills them
// with assign/resize allocates nothing in steady state.
// Throws shapefn::Error (kind kValue) for inputs the op rejects.
using NativeShapeFunc = void (*)(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs,
                                 ShapeVec* outputs);

// Reads element `i` of an integer (or float, truncated toward zero) host value.
int64_t ValueAsInt64(const DLTensor& value, int64_t i);
// Reads element `i` of any real-typed host value as double.
double ValueAsDouble(const DLTensor& value, int64_t i);
int64_t ValueNumel(const DLTensor& value);

}  // namespace shapefn
