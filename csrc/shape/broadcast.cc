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

void BroadcastShapes(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs,
                     std::vector<ShapeVec>* outputs) {
  int ndim = 0;
  for (int i = 0; i < num_inputs; ++i) ndim = std::max(ndim, inputs[i].ndim);
  ShapeVec out(static_cast<size_t>(ndim), 1);
  for (int i = 0; i < num_inputs; ++i) {
    const ShapeFuncInput& in = inputs[i];
    for (int k = 0; k < in.ndim; ++k) {
      int64_t d = in.shape[k];
      int64_t& o = out[static_cast<size_t>(ndim - in.ndim + k)];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::string shapes;
        for (int j = 0; j < num_inputs; ++j) shapes += (j ? " and " : "") + ShapeString(inputs[j]);
        FailOp(kBroadcast, "shapes " + shapes + " do not broadcast");
      }
      o = d;
    }
  }
  outputs->push_back(std::move(out));
}

SHAPEFN_BUILTIN(shapefn_broadcast2, "shapefn.broadcast", {}, (std::vector<bool>{false, false}), 1, false,
                BroadcastShapes);
SHAPEFN_BUILTIN(shapefn_broadcast3, "shapefn.broadcast3", {}, (std::vector<bool>{false, false, false}), 1,
                false, BroadcastShapes);

}  // namespace
}  // namespace shapefn
