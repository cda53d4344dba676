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

// shapefn.matmul_batch(a, b): the broadcast batch shape of a matmul of two
// operands of rank 2 or more (all but their last two sizes, numpy's rule),
// for a matmul whose batch sizes are unrelated symbols; the contracted sizes
// must agree.
constexpr const char* kMatmulBatch = "shapefn.matmul_batch";

void MatmulBatchShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kMatmulBatch);
  const ShapeFuncInput& a = inputs[0];
  const ShapeFuncInput& b = inputs[1];
  if (a.ndim < 2 || b.ndim < 2) {
    FailOp(kMatmulBatch, "operands " + ShapeString(a) + " and " + ShapeString(b) + " must have 2 or more dims");
  }
  if (a.shape[a.ndim - 1] != b.shape[b.ndim - 2]) {
    FailOp(kMatmulBatch,
           "cannot multiply " + ShapeString(a) + " by " + ShapeString(b) + ": the contracted sizes differ");
  }
  const int ndim = std::max(a.ndim, b.ndim) - 2;
  ShapeVec& out = outputs[0];
  out.assign(static_cast<size_t>(ndim), 1);
  for (const ShapeFuncInput* in : {&a, &b}) {
    const int batch = in->ndim - 2;
    for (int k = 0; k < batch; ++k) {
      int64_t& o = out[static_cast<size_t>(ndim - batch + k)];
      const int64_t d = in->shape[k];
      if (d == o || d == 1) continue;
      if (o != 1) {
        FailOp(kMatmulBatch, "the batch sizes of " + ShapeString(a) + " and " + ShapeString(b) + " do not broadcast");
      }
      o = d;
    }
  }
}

SHAPEFN_BUILTIN(shapefn_matmul_batch, kMatmulBatch, {}, (std::vector<bool>{false, false}), 1, false, MatmulBatchShape);

SHAPEFN_BUILTIN(shapefn_broadcast2, "shapefn.broadcast", {}, (std::vector<bool>{false, false}), 1, false,
                BroadcastShapes);
SHAPEFN_BUILTIN(shapefn_broadcast3, "shapefn.broadcast3", {}, (std::vector<bool>{false, false, false}), 1, false,
                BroadcastShapes);

}  // namespace
}  // namespace shapefn
