// Reductions whose axes are a value known only at run time (ONNX's Reduce*
// with `axes` as an input): the axes vector crosses, never the data.
#include <string>
#include <vector>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

// shapefn.reduce_axes(data, axes; keepdims): two shapes. outputs[0] is the
// result with every reduced axis kept as 1 (the kernel's shape: each kept
// extent is data's, each reduced one 1); outputs[1] is the result itself,
// without the reduced axes unless keepdims. Axes are numpy-style (negative
// counts from the end); a repeated axis is an error, as in numpy. An empty
// axes vector is decided where the model is imported, never here.
constexpr const char* kReduceAxes = "shapefn.reduce_axes";

void ReduceAxesShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kReduceAxes);
  const ShapeFuncInput& data = inputs[0];
  const bool keepdims = attrs.get(0, 1) != 0;
  thread_local ShapeVec axes;  // per-thread scratch: a steady-state call allocates nothing
  ReadIntVector(inputs[1], kReduceAxes, "axes", &axes, /*allow_scalar=*/true);
  ShapeVec& kept = outputs[0];
  kept.assign(data.shape, data.shape + data.ndim);
  thread_local std::vector<bool> reduced;
  reduced.assign(static_cast<size_t>(data.ndim), false);
  for (int64_t axis : axes) {
    const int a = NormalizeAxis(axis, data.ndim, kReduceAxes);
    if (reduced[static_cast<size_t>(a)]) {
      FailOp(kReduceAxes, "axes " + ShapeString(axes) + " name axis " + std::to_string(a) + " twice");
    }
    reduced[static_cast<size_t>(a)] = true;
    kept[static_cast<size_t>(a)] = 1;
  }
  ShapeVec& result = outputs[1];
  result.clear();
  for (int d = 0; d < data.ndim; ++d) {
    if (keepdims || !reduced[static_cast<size_t>(d)]) result.push_back(kept[static_cast<size_t>(d)]);
  }
}

SHAPEFN_BUILTIN(shapefn_reduce_axes, kReduceAxes, {}, (std::vector<bool>{false, true}), 2, false, ReduceAxesShape);

}  // namespace
}  // namespace shapefn
