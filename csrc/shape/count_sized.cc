// Ops whose output size depends on data the device computes: nonzero, unique
// and all-class non-max suppression.
//
// Reading that data on the host would cost a full device-to-host copy, so
// these shape functions return an *upper bound* from input shapes alone. The
// kernel writes into a buffer of that size plus a count, and the VM reads back
// only the count (count_sized = true in the registry) to give the output its
// exact extent.
#include <algorithm>
#include <string>
#include <vector>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

// ---------------------------------------------------------------------------
// relax.nonzero / dyn.nonzero: (ndim, count) with count <= numel.
constexpr const char* kNonzero = "relax.nonzero";

void NonzeroShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 1, kNonzero);
  const ShapeFuncInput& data = inputs[0];
  outputs[0].assign({data.ndim, CheckedNumel(data, kNonzero)});
}

SHAPEFN_BUILTIN(relax_nonzero, kNonzero, {"dyn.nonzero"}, (std::vector<bool>{false}), 1, true, NonzeroShape);

// ---------------------------------------------------------------------------
// relax.unique / dyn.unique: ONNX Unique over the flattened input. Unique
// values, their first indices, the inverse indices and the counts are each at
// most numel long. The inverse indices are always exactly numel long: only the
// other three outputs are really count-sized.
constexpr const char* kUnique = "relax.unique";

void UniqueShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 1, kUnique);
  const int64_t numel = CheckedNumel(inputs[0], kUnique);
  for (int i = 0; i < 4; ++i) outputs[i].assign({numel});
}

SHAPEFN_BUILTIN(relax_unique, kUnique, {"dyn.unique"}, (std::vector<bool>{false}), 4, true, UniqueShape);

// ---------------------------------------------------------------------------
// relax.vision.all_class_non_max_suppression / dyn.vision.non_max_suppression
//
// Output rows are (batch, class, box) triples; each (batch, class) pair keeps
// at most min(N, max_output_boxes_per_class) boxes. The cap is the one value
// read: it is a scalar the model usually holds as a host constant anyway.
constexpr const char* kNms = "relax.vision.all_class_non_max_suppression";

void AllClassNmsShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 5, kNms);
  const ShapeFuncInput& boxes = inputs[0];
  const ShapeFuncInput& scores = inputs[1];
  RequireRank(boxes, 3, kNms, "boxes");
  RequireRank(scores, 3, kNms, "scores");
  if (boxes.shape[2] != 4) {
    FailOp(kNms, "boxes must have shape (batch, num_boxes, 4), got " + ShapeString(boxes));
  }
  const int64_t batch = boxes.shape[0];
  const int64_t num_boxes = boxes.shape[1];
  const int64_t num_classes = scores.shape[1];
  if (scores.shape[0] != batch || scores.shape[2] != num_boxes) {
    FailOp(kNms, "scores " + ShapeString(scores) + " must have shape (" + std::to_string(batch) + ", num_classes, " +
                     std::to_string(num_boxes) + ") to match boxes " + ShapeString(boxes));
  }
  // ONNX: a negative cap selects nothing, like 0.
  const int64_t cap = std::max<int64_t>(0, ReadIntScalar(inputs[2], kNms, "max_output_boxes_per_class"));
  const int64_t per_class = std::min(num_boxes, cap);
  const int64_t rows = CheckedMul(CheckedMul(batch, num_classes, kNms), per_class, kNms);
  outputs[0].assign({rows, 3});
}

SHAPEFN_BUILTIN(relax_vision_all_class_non_max_suppression, kNms, {"dyn.vision.non_max_suppression"},
                (std::vector<bool>{false, false, true, false, false}), 1, true, AllClassNmsShape);

}  // namespace
}  // namespace shapefn
