// Broadcasting of input shapes (numpy rules) for elementwise ops whose
// operands carry unrelated symbolic sizes: the compiler cannot tell whether
// a size is 1 at run time, so it asks the host. Shapes only: no values.
#include <algorithm>
#include <string>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

constexpr const char* kBroadcast = "shapefn.broadcast";

[[noreturn]] __attribute__((cold, noinline)) void FailBroadcast(const ShapeFuncInput* inputs, int num_inputs) {
  std::string shapes;
  for (int j = 0; j < num_inputs; ++j) shapes += (j ? " and " : "") + ShapeString(inputs[j]);
  FailOp(kBroadcast, "shapes " + shapes + " do not broadcast");
}

void BroadcastShapes(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  int ndim = 0;
  for (int i = 0; i < num_inputs; ++i) ndim = std::max(ndim, inputs[i].ndim);
  ShapeVec& out = outputs[0];  // empty, with the capacity of earlier calls
  for (int k = 0; k < ndim; ++k) out.push_back(1);
  int64_t* o = out.data();
  for (int i = 0; i < num_inputs; ++i) {
    const ShapeFuncInput& in = inputs[i];
    int64_t* aligned = o + (ndim - in.ndim);  // right-aligned, numpy's rule
    for (int k = 0; k < in.ndim; ++k) {
      const int64_t d = in.shape[k];
      if (d == aligned[k] || d == 1) continue;
      if (aligned[k] != 1) FailBroadcast(inputs, num_inputs);
      aligned[k] = d;
    }
  }
}

SHAPEFN_BUILTIN(shapefn_broadcast2, "shapefn.broadcast", {}, (std::vector<bool>{false, false}), 1, false,
                BroadcastShapes);
SHAPEFN_BUILTIN(shapefn_broadcast3, "shapefn.broadcast3", {}, (std::vector<bool>{false, false, false}), 1, false,
                BroadcastShapes);

}  // namespace
}  // namespace shapefn
