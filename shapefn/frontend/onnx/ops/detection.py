"""shapefn's ONNX converters for the post-processing operators of
detection models where TVM's converter gives another result than ONNX
defines: RoiAlign's half-pixel shift and batch indices (checked against
the batch), NonZero of a scalar, and NonMaxSuppression with its limits
given at run time."""
from __future__ import annotations

import numpy as np
from tvm import relax

from ....compiler.passes import index_checks
from ..registry import converter, tvm_converter
from ..values import absent, as_tensor, str_attr


@converter("RoiAlign")
def roi_align(importer, inputs, attrs, opset):
    """TVM's converter, with ``half_pixel``'s shift of half a pixel made in
    the feature map's coordinates (after ``spatial_scale``), as ONNX and
    onnxruntime make it: TVM's converter shifts the RoIs before scaling
    them, off by ``0.5 * (1 - spatial_scale)`` map pixels."""
    default = "half_pixel" if opset >= 16 else "output_half_pixel"
    scale = float(attrs.get("spatial_scale", 1.0))
    bb = importer.bb
    if len(inputs) == 3 and isinstance(inputs[0].ty, relax.TensorType) and inputs[0].ty.shape is not None:
        # Each RoI's batch index within [0, N) (TVM's kernel reads the map at it unchecked).
        batch = inputs[0].ty.shape.values[0]
        checked = bb.emit_te(index_checks.checked_tensor, as_tensor(bb, inputs[2]), batch, "batch index",
                             False, primfunc_name_hint="roi_batch_indices")
        inputs = [inputs[0], inputs[1], bb.normalize(relax.op.astype(checked, str(inputs[2].ty.dtype)))]
    if str_attr(attrs.get("coordinate_transformation_mode"), default) == "half_pixel" and scale not in (0.0, 1.0) \
            and len(inputs) == 3:
        rois = as_tensor(bb, inputs[1])
        shift = relax.const(0.5 - 0.5 / scale, str(rois.ty.dtype))
        inputs = [inputs[0], bb.normalize(relax.op.add(rois, shift)), inputs[2]]
    return tvm_converter(importer, "RoiAlign", inputs, attrs, opset)


@converter("NonZero")
def nonzero(importer, inputs, attrs, opset):
    """NonZero of a scalar as of a one-element vector: onnxruntime gives
    ``[[0]]`` (rank 1) for a true scalar, TVM's ``nonzero`` a rank-0 index
    list (found by fuzzing)."""
    data = inputs[0]
    if not isinstance(data.ty, relax.TensorType) or data.ty.ndim != 0:
        return NotImplemented
    return tvm_converter(importer, "NonZero", [importer.bb.normalize(relax.op.reshape(data, [1]))], attrs, opset)


@converter("NonMaxSuppression")
def non_max_suppression(importer, inputs, attrs, opset):
    """NMS with its limits as tensors. TVM's converter reads
    max_output_boxes_per_class, iou_threshold and score_threshold only when
    they are constants and otherwise substitutes 0, 0.5 and 0.0; it also
    treats an absent score_threshold as 0.0, dropping boxes whose score is
    not above 0, where ONNX (and onnxruntime) keep every box. shapefn's NMS
    kernel takes the three as runtime tensors; ONNX defaults when absent:
    no boxes (0), IoU threshold 0, no score threshold (-inf)."""
    bb = importer.bb
    boxes, scores = inputs[0], inputs[1]

    def limit(i, dtype, default):
        value = inputs[i] if len(inputs) > i else None
        if absent(importer, value):
            return relax.const(np.full([1], default, dtype), dtype)
        return as_tensor(bb, value, dtype)

    if attrs.get("center_point_box", 0):
        # [x_center, y_center, width, height] -> corners (the IoU test is symmetric in x and y).
        centers = bb.emit(relax.op.strided_slice(boxes, axes=[2], begin=[0], end=[2]))
        half = bb.emit(relax.op.multiply(bb.emit(relax.op.strided_slice(boxes, axes=[2], begin=[2], end=[4])),
                                         relax.const(0.5, "float32")))
        boxes = bb.emit(relax.op.concat([bb.emit(relax.op.subtract(centers, half)),
                                         bb.emit(relax.op.add(centers, half))], axis=2))
    # TVM's all_class_non_max_suppression dereferences its inputs' shapes
    # unchecked (a segfault for a tensor of known rank and unknown shape, as
    # the corners computed from symbolic center boxes are).
    boxes, scores = importer.with_shape(boxes), importer.with_shape(scores)
    result = bb.emit(relax.op.vision.all_class_non_max_suppression(
        boxes, scores, limit(2, "int64", 0), limit(3, "float32", 0.0), limit(4, "float32", -np.inf),
        output_format="onnx"))
    return relax.TupleGetItem(result, 0)
