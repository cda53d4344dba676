// Ops whose output extent is a scalar value: topk (k) and arange
// (start/stop/step). The scalars are a few bytes each; the data operand of
// topk contributes only its shape.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

// ---------------------------------------------------------------------------
// relax.topk / dyn.topk: values and indices both take data's shape with the
// reduced axis replaced by k.
constexpr const char* kTopK = "relax.topk";

void TopKShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kTopK);
  const ShapeFuncInput& data = inputs[0];
  const int64_t k = ReadIntScalar(inputs[1], kTopK, "k");
  if (data.ndim == 0) FailOp(kTopK, "data must have at least one dim, got a scalar");
  const int axis = NormalizeAxis(attrs.get(0, -1), data.ndim, kTopK);
  const int64_t dim = data.shape[axis];
  if (k < 0 || k > dim) {
    FailOp(kTopK, "k is " + std::to_string(k) + " but axis " + std::to_string(axis) + " of data " + ShapeString(data) +
                      " has " + std::to_string(dim) + " elements");
  }
  ShapeVec& out = outputs[0];
  out.assign(data.shape, data.shape + data.ndim);
  out[static_cast<size_t>(axis)] = k;
  outputs[1] = out;
}

SHAPEFN_BUILTIN(relax_topk, kTopK, {"dyn.topk"}, (std::vector<bool>{false, true}), 2, false, TopKShape);

// ---------------------------------------------------------------------------
// relax.arange / dyn.arange: the length numpy.arange would produce.
//
// Integer operands use exact integer arithmetic, because ceil of a double
// quotient is off by one for large int64 ranges. Anything with a float
// operand follows numpy's float rule (ceil((stop - start) / step)).
constexpr const char* kArange = "relax.arange";

int64_t IntegerArangeLength(int64_t start, int64_t stop, int64_t step) {
  // The distance may exceed int64 (start = INT64_MIN, stop = INT64_MAX) but
  // always fits in uint64.
  uint64_t distance;
  uint64_t magnitude;
  if (step > 0) {
    if (stop <= start) return 0;
    distance = static_cast<uint64_t>(stop) - static_cast<uint64_t>(start);
    magnitude = static_cast<uint64_t>(step);
  } else {
    if (stop >= start) return 0;
    distance = static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
    magnitude = 0 - static_cast<uint64_t>(step);
  }
  const uint64_t length = (distance - 1) / magnitude + 1;
  if (length > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    FailOp(kArange, "length " + std::to_string(length) + " overflows int64");
  }
  return static_cast<int64_t>(length);
}

int64_t RealArangeLength(double start, double stop, double step) {
  const double delta = stop - start;
  const double quotient = delta / step;
  // numpy's underflow rule: a nonzero distance whose quotient rounds to 0
  // (tiny delta or infinite step) still yields one element when the signs
  // agree.
  if (quotient == 0.0 && delta != 0.0) return std::signbit(quotient) ? 0 : 1;
  if (std::isnan(quotient)) {
    FailOp(kArange, "cannot compute the length of arange(" + std::to_string(start) + ", " + std::to_string(stop) +
                        ", " + std::to_string(step) + ")");
  }
  const double length = std::ceil(quotient);
  if (length <= 0.0) return 0;
  if (!(length < 9223372036854775808.0)) {  // 2^63, exact in double; also catches inf
    FailOp(kArange, "length of arange(" + std::to_string(start) + ", " + std::to_string(stop) + ", " +
                        std::to_string(step) + ") overflows int64");
  }
  return static_cast<int64_t>(length);
}

void ArangeShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 3, kArange);
  const char* names[3] = {"start", "stop", "step"};
  const DLTensor* values[3];
  bool all_integer = true;
  for (int i = 0; i < 3; ++i) {
    values[i] = &ScalarValueOf(inputs[i], kArange, names[i]);
    // Bools count as integers here, as they do for numpy.arange.
    if (values[i]->dtype.code == kDLFloat || values[i]->dtype.code == kDLBfloat) {
      all_integer = false;
    }
  }
  int64_t length;
  if (all_integer) {
    const int64_t start = ValueAsInt64(*values[0], 0);
    const int64_t stop = ValueAsInt64(*values[1], 0);
    const int64_t step = ValueAsInt64(*values[2], 0);
    if (step == 0) FailOp(kArange, "step is 0");
    length = IntegerArangeLength(start, stop, step);
  } else {
    const double start = ValueAsDouble(*values[0], 0);
    const double stop = ValueAsDouble(*values[1], 0);
    const double step = ValueAsDouble(*values[2], 0);
    if (step == 0.0) FailOp(kArange, "step is 0");
    length = RealArangeLength(start, stop, step);
  }
  outputs[0].assign({length});
}

SHAPEFN_BUILTIN(relax_arange, kArange, {"dyn.arange"}, (std::vector<bool>{true, true, true}), 1, false, ArangeShape);

// shapefn.one_hot(indices, depth; axis): ONNX OneHot's output shape, the
// indices' with `depth` inserted at `axis` (in [-rank - 1, rank], negative
// counting from the end of the output). Depth is a positive integer scalar
// (the importer casts ONNX's numeric depth to int64).
constexpr const char* kOneHot = "shapefn.one_hot";

void OneHotShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kOneHot);
  const ShapeFuncInput& indices = inputs[0];
  const int axis = NormalizeAxis(attrs.get(0, -1), indices.ndim + 1, kOneHot);
  const int64_t depth = ReadIntScalar(inputs[1], kOneHot, "depth");
  if (depth < 1) FailOp(kOneHot, "depth is " + std::to_string(depth) + ", it must be at least 1");
  ShapeVec& out = outputs[0];
  out.assign(indices.shape, indices.shape + indices.ndim);
  out.insert(out.begin() + axis, depth);
}

SHAPEFN_BUILTIN(shapefn_one_hot, kOneHot, {}, (std::vector<bool>{false, true}), 1, false, OneHotShape);

}  // namespace
}  // namespace shapefn
