// relax.dynamic_strided_slice (Relay: dyn.strided_slice).
//
// The data tensor contributes only its shape; begin/end/strides are the small
// values the VM copies to the host. This is the op that motivates per-input
// masks: a whole feature map would otherwise cross the bus for three int64s.
#include <string>
#include <vector>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

constexpr const char* kOp = "relax.dynamic_strided_slice";

// len(range(*slice(begin, end, stride).indices(dim))), following CPython's
// PySlice_AdjustIndices so that results match numpy basic indexing exactly.
int64_t SliceExtent(int64_t begin, int64_t end, int64_t stride, int64_t dim) {
  // With a negative stride the iteration may stop *before* index 0, which
  // CPython encodes as -1.
  const int64_t lower = stride < 0 ? -1 : 0;
  const int64_t upper = stride < 0 ? dim - 1 : dim;
  auto clip = [&](int64_t index) {
    if (index < 0) {
      index += dim;  // cannot overflow: index < 0 <= dim
      return index < lower ? lower : index;
    }
    return index > upper ? upper : index;
  };
  const int64_t start = clip(begin);
  const int64_t stop = clip(end);
  // start and stop lie in [-1, dim], so their difference cannot overflow; the
  // stride magnitude is taken unsigned so INT64_MIN is handled.
  const int64_t span = stride > 0 ? stop - start : start - stop;
  if (span <= 0) return 0;
  const uint64_t step = stride > 0 ? static_cast<uint64_t>(stride) : 0 - static_cast<uint64_t>(stride);
  return static_cast<int64_t>((static_cast<uint64_t>(span) - 1) / step + 1);
}

void StridedSliceShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 4, kOp);
  const ShapeFuncInput& data = inputs[0];
  // Per-thread scratch, kept from call to call: a steady-state call allocates nothing.
  thread_local ShapeVec begin, end, strides;
  ReadIntVector(inputs[1], kOp, "begin", &begin);
  ReadIntVector(inputs[2], kOp, "end", &end);
  ReadIntVector(inputs[3], kOp, "strides", &strides);
  if (end.size() != begin.size() || strides.size() != begin.size()) {
    FailOp(kOp, "begin, end and strides must have equal lengths, got " + std::to_string(begin.size()) + ", " +
                    std::to_string(end.size()) + " and " + std::to_string(strides.size()));
  }
  if (begin.size() > static_cast<size_t>(data.ndim)) {
    FailOp(kOp, "begin has " + std::to_string(begin.size()) + " entries but data " + ShapeString(data) + " has only " +
                    std::to_string(data.ndim) + " dims");
  }
  ShapeVec& out = outputs[0];
  out.assign(data.shape, data.shape + data.ndim);
  for (size_t i = 0; i < begin.size(); ++i) {
    if (strides[i] == 0) FailOp(kOp, "strides[" + std::to_string(i) + "] is 0");
    out[i] = SliceExtent(begin[i], end[i], strides[i], data.shape[i]);
  }
}

SHAPEFN_BUILTIN(relax_dynamic_strided_slice, kOp, {"dyn.strided_slice"}, (std::vector<bool>{false, true, true, true}),
                1, false, StridedSliceShape);

// shapefn.slice_extents(data, extents): the output shape of a slice whose
// begin/end/strides live on the device, computed there by the kernel
// `slice_extents` (shapefn/compiler/kernels/slicing.py): only these extents
// cross, not the three parameter vectors. The kernel writes -1 where a stride
// is 0, reported here as the slice's error.
void SliceExtentsShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, "shapefn.slice_extents");
  const ShapeFuncInput& data = inputs[0];
  ShapeVec& out = outputs[0];
  ReadIntVector(inputs[1], kOp, "extents", &out);
  if (out.size() != static_cast<size_t>(data.ndim)) {
    FailOp(kOp, "the slice has " + std::to_string(out.size()) + " extents but data " + ShapeString(data) + " has " +
                    std::to_string(data.ndim) + " dims");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0) FailOp(kOp, "strides[" + std::to_string(i) + "] is 0");
  }
}

SHAPEFN_BUILTIN(shapefn_slice_extents, "shapefn.slice_extents", {}, (std::vector<bool>{false, true}), 1, false,
                SliceExtentsShape);

// shapefn.split_sizes(data, split; axis): the sizes of the parts an ONNX
// Split with sizes given at run time cuts `data` into along `axis`, as a
// shape: `split` itself, once checked (no negative size; the sizes add up to
// the axis' extent, as ONNX requires).
constexpr const char* kSplitSizes = "shapefn.split_sizes";

void SplitSizesShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kSplitSizes);
  const ShapeFuncInput& data = inputs[0];
  const int axis = NormalizeAxis(attrs.get(0, 0), data.ndim, kSplitSizes);
  ShapeVec& sizes = outputs[0];
  ReadIntVector(inputs[1], kSplitSizes, "split", &sizes);
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 0) FailOp(kSplitSizes, "split " + ShapeString(sizes) + " holds a negative size");
    total = CheckedAdd(total, size, kSplitSizes);
  }
  if (total != data.shape[axis]) {
    FailOp(kSplitSizes, "split " + ShapeString(sizes) + " adds up to " + std::to_string(total) + ", not to the " +
                            std::to_string(data.shape[axis]) + " elements of axis " + std::to_string(axis) +
                            " of data " + ShapeString(data));
  }
}

SHAPEFN_BUILTIN(shapefn_split_sizes, kSplitSizes, {}, (std::vector<bool>{false, true}), 1, false, SplitSizesShape);

}  // namespace
}  // namespace shapefn
