// Ops whose output shape is (mostly) a shape *value*: reshape, broadcast_to,
// full/zeros/ones and tile. The data operand, where there is one, contributes
// only its shape, so none of these ever needs a device tensor on the host.
#include <algorithm>
#include <string>
#include <vector>

#include "shape_util.h"
#include "shapefn/registry.h"

namespace shapefn {
namespace {

using namespace shape_util;

// ---------------------------------------------------------------------------
// relax.reshape / dyn.reshape
//
// ONNX Reshape semantics, which is what dynamic reshapes in imported models
// carry: with allowzero=0 a 0 copies the input dim at the same index (so a
// model can say "keep the batch dim" without knowing it); with allowzero=1 it
// is a literal 0. One -1 is inferred from the element count.
constexpr const char* kReshape = "relax.reshape";

void ReshapeShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kReshape);
  const ShapeFuncInput& data = inputs[0];
  const bool allowzero = attrs.get(0, 0) != 0;
  ShapeVec& out = outputs[0];
  ReadIntVector(inputs[1], kReshape, "newshape", &out);
  // Error text is built only on failure (re-reading the request): building it
  // up front cost more than the whole shape function.
  auto requested = [&] { return ShapeString(ReadIntVector(inputs[1], kReshape, "newshape")); };
  auto at = [](size_t i) { return "newshape[" + std::to_string(i) + "]"; };

  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowzero) {
      if (i >= static_cast<size_t>(data.ndim)) {
        FailOp(kReshape, at(i) + " is 0 (copy the input dim) but data " + ShapeString(data) + " has only " +
                             std::to_string(data.ndim) + " dims");
      }
      out[i] = data.shape[i];
    } else if (out[i] == -1) {
      if (inferred >= 0) {
        FailOp(kReshape, "newshape " + requested() + " has more than one -1");
      }
      inferred = static_cast<int>(i);
      continue;
    } else if (out[i] < 0) {
      FailOp(kReshape, at(i) + " is " + std::to_string(out[i]) + ", only -1 may be negative");
    }
    known = CheckedMul(known, out[i], kReshape);
  }

  const int64_t total = CheckedNumel(data, kReshape);
  if (inferred >= 0) {
    // numpy refuses to guess when the other dims multiply to 0 (any value
    // would do), and so do we.
    if (known == 0 || total % known != 0) {
      FailOp(kReshape, "cannot infer the -1 in newshape " + requested() + " for data " + ShapeString(data) + " of " +
                           std::to_string(total) + " elements");
    }
    out[static_cast<size_t>(inferred)] = total / known;
  } else if (known != total) {
    FailOp(kReshape, "cannot reshape data " + ShapeString(data) + " of " + std::to_string(total) + " elements into " +
                         ShapeString(out));
  }
}

SHAPEFN_BUILTIN(relax_reshape, kReshape, {"dyn.reshape"}, (std::vector<bool>{false, true}), 1, false, ReshapeShape);

// ---------------------------------------------------------------------------
// relax.broadcast_to / dyn.broadcast_to
//
// bidirectional=0 is numpy.broadcast_to (the target is the result);
// bidirectional=1 is ONNX Expand, where the target may itself be broadcast by
// the data, i.e. numpy.broadcast_shapes(data.shape, target).
constexpr const char* kBroadcastTo = "relax.broadcast_to";

[[noreturn]] void FailBroadcast(const ShapeFuncInput& data, const ShapeVec& target, const std::string& why) {
  FailOp(kBroadcastTo, "cannot broadcast data " + ShapeString(data) + " to shape " + ShapeString(target) + ": " + why);
}

void BroadcastToShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kBroadcastTo);
  const ShapeFuncInput& data = inputs[0];
  const bool bidirectional = attrs.get(0, 0) != 0;
  // Per-thread scratch, kept from call to call: a steady-state call allocates nothing.
  thread_local ShapeVec target;
  ReadIntVector(inputs[1], kBroadcastTo, "shape", &target);
  RequireNonNegativeDims(target, kBroadcastTo, "shape");

  const int target_ndim = static_cast<int>(target.size());
  if (!bidirectional && target_ndim < data.ndim) {
    FailBroadcast(data, target, "the target has fewer dims than the data");
  }
  const int ndim = std::max(target_ndim, data.ndim);
  ShapeVec& out = outputs[0];
  out.resize(static_cast<size_t>(ndim));
  // Walk right-aligned; a missing leading dim behaves as 1.
  for (int k = 1; k <= ndim; ++k) {
    const int64_t d = k <= data.ndim ? data.shape[data.ndim - k] : 1;
    const int64_t t = k <= target_ndim ? target[static_cast<size_t>(target_ndim - k)] : 1;
    int64_t r;
    if (d == t || d == 1) {
      r = t;
    } else if (bidirectional && t == 1) {
      r = d;
    } else {
      FailBroadcast(
          data, target,
          "dim " + std::to_string(d) + " does not match " + std::to_string(t) + " at axis " + std::to_string(-k));
    }
    out[static_cast<size_t>(ndim - k)] = r;
  }
}

SHAPEFN_BUILTIN(relax_broadcast_to, kBroadcastTo, {"dyn.broadcast_to"}, (std::vector<bool>{false, true}), 1, false,
                BroadcastToShape);

// ---------------------------------------------------------------------------
// relax.full / relax.zeros / relax.ones: the output shape *is* the shape
// value. The fill value of `full` is only ever a shape (its value goes to the
// kernel, not here).
constexpr const char* kFull = "relax.full";
constexpr const char* kZeros = "relax.zeros";
constexpr const char* kOnes = "relax.ones";

void ShapeFromValue(const ShapeFuncInput& shape, const char* op, ShapeVec* outputs) {
  ShapeVec& out = outputs[0];
  ReadIntVector(shape, op, "shape", &out);
  RequireNonNegativeDims(out, op, "shape");
  CheckedNumel(out, op);  // a shape whose size overflows cannot be allocated
}

void FullShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kFull);
  ShapeFromValue(inputs[1], kFull, outputs);
}

void ZerosShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 1, kZeros);
  ShapeFromValue(inputs[0], kZeros, outputs);
}

void OnesShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 1, kOnes);
  ShapeFromValue(inputs[0], kOnes, outputs);
}

SHAPEFN_BUILTIN(relax_full, kFull, {"dyn.full"}, (std::vector<bool>{false, true}), 1, false, FullShape);
SHAPEFN_BUILTIN(relax_zeros, kZeros, {"dyn.zeros"}, (std::vector<bool>{true}), 1, false, ZerosShape);
SHAPEFN_BUILTIN(relax_ones, kOnes, {"dyn.ones"}, (std::vector<bool>{true}), 1, false, OnesShape);

// ---------------------------------------------------------------------------
// relax.tile / dyn.tile: numpy.tile, where the shorter of (data.shape,
// repeats) is padded with leading 1s before the elementwise product.
constexpr const char* kTile = "relax.tile";

void TileShape(const ShapeFuncInput* inputs, int num_inputs, const ShapeFuncAttrs& attrs, ShapeVec* outputs) {
  RequireInputs(num_inputs, 2, kTile);
  const ShapeFuncInput& data = inputs[0];
  // Per-thread scratch, kept from call to call: a steady-state call allocates nothing.
  thread_local ShapeVec reps;
  ReadIntVector(inputs[1], kTile, "repeats", &reps, /*allow_scalar=*/true);
  RequireNonNegativeDims(reps, kTile, "repeats");

  const int reps_ndim = static_cast<int>(reps.size());
  const int ndim = std::max(reps_ndim, data.ndim);
  ShapeVec& out = outputs[0];
  out.resize(static_cast<size_t>(ndim));
  for (int k = 1; k <= ndim; ++k) {
    const int64_t d = k <= data.ndim ? data.shape[data.ndim - k] : 1;
    const int64_t r = k <= reps_ndim ? reps[static_cast<size_t>(reps_ndim - k)] : 1;
    out[static_cast<size_t>(ndim - k)] = CheckedMul(d, r, kTile);
  }
  CheckedNumel(out, kTile);
}

SHAPEFN_BUILTIN(relax_tile, kTile, {"dyn.tile"}, (std::vector<bool>{false, true}), 1, false, TileShape);

}  // namespace
}  // namespace shapefn
