// Spatial ops whose output extents come from a small value: image.resize2d
// (the target size) and nn.pad (the pad widths). The image itself contributes
// only its shape, which is the point: it is the large tensor on the device.
#include <string>
#include <vector>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

// ---------------------------------------------------------------------------
// relax.image.resize2d / dyn.image.resize2d
constexpr const char* kResize2d = "relax.image.resize2d";

// Layout codes of attrs[0]; the compiler lowers the layout string to these.
constexpr int64_t kLayoutNCHW = 0;
constexpr int64_t kLayoutNHWC = 1;

void Resize2dShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kResize2d);
  const ShapeFuncInput& data = inputs[0];
  RequireRank(data, 4, kResize2d, "data");
  // Per-thread scratch, kept from call to call: a steady-state call allocates nothing.
  thread_local ShapeVec size;
  ReadIntVector(inputs[1], kResize2d, "size", &size);
  if (size.size() != 2) {
    FailOp(kResize2d, "size must have 2 entries (height, width), got " + std::to_string(size.size()));
  }
  RequireNonNegativeDims(size, kResize2d, "size");
  const int64_t layout = attrs.get(0, kLayoutNCHW);
  ShapeVec& out = outputs[0];
  out.assign(data.shape, data.shape + 4);
  if (layout == kLayoutNCHW) {
    out[2] = size[0];
    out[3] = size[1];
  } else if (layout == kLayoutNHWC) {
    out[1] = size[0];
    out[2] = size[1];
  } else {
    FailOp(kResize2d, "layout code " + std::to_string(layout) + " is not 0 (NCHW) or 1 (NHWC)");
  }
  CheckedNumel(out, kResize2d);
}

SHAPEFN_BUILTIN(relax_image_resize2d, kResize2d, {"dyn.image.resize2d"}, (std::vector<bool>{false, true}), 1, false,
                Resize2dShape);

// ---------------------------------------------------------------------------
// relax.nn.pad / dyn.nn.pad
//
// pad_width comes either as numpy's (ndim, 2) pairs or as ONNX Pad's flat
// (2 * ndim,) vector [b0 .. b{n-1}, e0 .. e{n-1}]. The shape of the value says
// which. Negative widths crop, as in ONNX; cropping below zero is an error.
constexpr const char* kPad = "relax.nn.pad";

void PadShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 3, kPad);
  const ShapeFuncInput& data = inputs[0];
  const DLTensor& pads = ValueOf(inputs[1], kPad, "pad_width");
  RequireIntegerDType(pads, kPad, "pad_width");
  const int64_t ndim = data.ndim;
  const bool pairs = pads.ndim == 2 && pads.shape[0] == ndim && pads.shape[1] == 2;
  const bool flat = pads.ndim == 1 && pads.shape[0] == 2 * ndim;
  if (!pairs && !flat) {
    FailOp(kPad, "pad_width must have shape (" + std::to_string(ndim) + ", 2) or (" + std::to_string(2 * ndim) +
                     ",) for data " + ShapeString(data) + ", got " + ShapeString(pads.shape, pads.ndim));
  }
  ShapeVec& out = outputs[0];
  out.resize(static_cast<size_t>(ndim));
  for (int64_t i = 0; i < ndim; ++i) {
    const int64_t before = ValueAsInt64(pads, pairs ? 2 * i : i);
    const int64_t after = ValueAsInt64(pads, pairs ? 2 * i + 1 : ndim + i);
    const int64_t extent = CheckedAdd(CheckedAdd(data.shape[i], before, kPad), after, kPad);
    if (extent < 0) {
      FailOp(kPad, "axis " + std::to_string(i) + " of data " + ShapeString(data) + " padded by (" +
                       std::to_string(before) + ", " + std::to_string(after) + ") has negative extent " +
                       std::to_string(extent));
    }
    out[static_cast<size_t>(i)] = extent;
  }
  CheckedNumel(out, kPad);
}

SHAPEFN_BUILTIN(relax_nn_pad, kPad, {"dyn.nn.pad"}, (std::vector<bool>{false, true, false}), 1, false, PadShape);

}  // namespace
}  // namespace shapefn
