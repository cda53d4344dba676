"""A Mask R-CNN-style mask head (torchvision's roi_heads mask branch, small
and hand-made), imported with shapefn.from_onnx, compiled once for a strict
sim and once for opencl (``onnx_check`` runs it on both, the counters equal)
and compared with onnxruntime at two feature-map sizes and detection
counts: detections kept by a score threshold (NonZero) and the best of them
(TopK with a runtime k), RoiAlign at 14x14 on those boxes, Conv + ConvTranspose
(2x2, stride 2) + Conv to per-class 28x28 logits, Sigmoid, and each
detection's class mask picked by its runtime label, as torchvision's
``mask_prob[arange(n), labels]`` exports (flattened index + Gather) and as
GatherElements and as GatherND. Pasting masks into the image happens outside ONNX."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from conftest import DEVICES

# onnx_check runs these on every device: a detector's mask head on the device: RoiAlign, a Loop, the counts read back.
ONNX_CHECK_DEVICES = DEVICES

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(0)
CHANNELS, HIDDEN, CLASSES, MAX_DETECTIONS = 4, 6, 3, 5


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def mask_head_model():
    weights = {
        "conv_w": rng.standard_normal((HIDDEN, CHANNELS, 3, 3)).astype(np.float32) * 0.3,
        "conv_b": rng.standard_normal(HIDDEN).astype(np.float32) * 0.1,
        "deconv_w": rng.standard_normal((HIDDEN, HIDDEN, 2, 2)).astype(np.float32) * 0.3,  # (in, out, kh, kw)
        "deconv_b": rng.standard_normal(HIDDEN).astype(np.float32) * 0.1,
        "logits_w": rng.standard_normal((CLASSES, HIDDEN, 1, 1)).astype(np.float32) * 0.3,
        "logits_b": rng.standard_normal(CLASSES).astype(np.float32) * 0.1,
        "threshold": np.float32(0.3), "max_det": np.array([MAX_DETECTIONS], np.int64),
        "zero": np.int64(0), "one": np.int64(1), "axis0": np.array([0], np.int64), "one1": np.array([1], np.int64),
        "two1": np.array([2], np.int64), "four1": np.array([4], np.int64), "five": np.array([5], np.int64),
        "minus_one": np.array([-1], np.int64), "per_box": np.array([-1, 1, 1, 1], np.int64),
        "mask_size": np.array([1, 28, 28], np.int64),
    }
    nodes = [
        # Detections above the score threshold, then at most MAX_DETECTIONS best.
        node("Greater", ["scores", "threshold"], ["above"]), node("NonZero", ["above"], ["nz"]),
        node("Squeeze", ["nz", "axis0"], ["kept"]),
        node("Gather", ["scores", "kept"], ["kept_scores"], axis=0),
        node("Shape", ["kept_scores"], ["n_kept"]), node("Min", ["n_kept", "max_det"], ["k"]),
        node("TopK", ["kept_scores", "k"], ["det_scores", "order"], axis=0),
        node("Gather", ["kept", "order"], ["det"], axis=0),
        node("Gather", ["boxes", "det"], ["det_boxes"], axis=0),
        node("Gather", ["labels", "det"], ["det_labels"], axis=0),
        # ROI features as torchvision exports them: rois = [batch index, box]
        # (one image: index 0), split again for RoiAlign.
        node("Shape", ["det_boxes"], ["box_shape"]), node("Slice", ["box_shape", "axis0", "one1"], ["n_det"]),
        node("Concat", ["n_det", "one1"], ["col_shape"], axis=0),
        node("ConstantOfShape", ["col_shape"], ["image_col"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
        node("Concat", ["image_col", "det_boxes"], ["rois"], axis=1),
        node("Slice", ["rois", "axis0", "one1", "one1"], ["roi_idx"]), node("Cast", ["roi_idx"], ["roi_idx64"], to=I64),
        node("Squeeze", ["roi_idx64", "one1"], ["batch_idx"]),
        node("Slice", ["rois", "one1", "five", "one1"], ["roi_boxes"]),
        node("RoiAlign", ["features", "roi_boxes", "batch_idx"], ["roi"], output_height=14, output_width=14,
             sampling_ratio=2, spatial_scale=0.25, mode="avg"),
        node("Conv", ["roi", "conv_w", "conv_b"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Relu", ["c1"], ["r1"]),
        node("ConvTranspose", ["r1", "deconv_w", "deconv_b"], ["up"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Relu", ["up"], ["r2"]),
        node("Conv", ["r2", "logits_w", "logits_b"], ["logits"], kernel_shape=[1, 1]),
        node("Sigmoid", ["logits"], ["probs"]),
        # mask_prob[arange(n), labels] as torch exports it: an index into the
        # probabilities with the first two axes flattened, sizes from Shape.
        node("Shape", ["probs"], ["probs_shape"]), node("Gather", ["probs_shape", "zero"], ["n"], axis=0),
        node("Gather", ["probs_shape", "one"], ["n_classes"], axis=0), node("Range", ["zero", "n", "one"], ["rows"]),
        node("Mul", ["rows", "n_classes"], ["row_start"]), node("Add", ["row_start", "det_labels"], ["flat_idx"]),
        node("Slice", ["probs_shape", "two1", "four1"], ["mask_hw"]),
        node("Concat", ["minus_one", "mask_hw"], ["flat_shape"], axis=0),
        node("Reshape", ["probs", "flat_shape"], ["flat_probs"]),
        node("Gather", ["flat_probs", "flat_idx"], ["picked"], axis=0),
        node("Unsqueeze", ["picked", "one1"], ["masks"]),
        # The same selection with GatherElements along the class axis.
        node("Reshape", ["det_labels", "per_box"], ["label4"]),
        node("Concat", ["n_det", "mask_size"], ["mask_shape"], axis=0),
        node("Expand", ["label4", "mask_shape"], ["label_idx"]),
        node("GatherElements", ["probs", "label_idx"], ["masks_ge"], axis=1),
        # And with GatherND on (row, label) pairs.
        node("Unsqueeze", ["rows", "one1"], ["rows2"]), node("Unsqueeze", ["det_labels", "one1"], ["labels2"]),
        node("Concat", ["rows2", "labels2"], ["pairs"], axis=1),
        node("GatherND", ["probs", "pairs"], ["masks_nd"]),
    ]
    graph = helper.make_graph(
        nodes, "mask_head",
        [helper.make_tensor_value_info("features", F, [1, CHANNELS, "H", "W"]),
         helper.make_tensor_value_info("boxes", F, ["N", 4]), helper.make_tensor_value_info("scores", F, ["N"]),
         helper.make_tensor_value_info("labels", I64, ["N"])],
        [helper.make_tensor_value_info(name, t, None) for name, t in
         (("masks", F), ("masks_ge", F), ("masks_nd", F), ("det_boxes", F), ("det_scores", F), ("det_labels", I64))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def detections(n, height, width):
    """Boxes inside a ``height`` x ``width`` feature map at stride 4."""
    corners = np.sort(rng.uniform(0, 4 * min(height, width), (n, 2, 2)), axis=1)
    return (rng.standard_normal((1, CHANNELS, height, width)).astype(np.float32),
            corners.transpose(0, 2, 1).reshape(n, 4)[:, [0, 2, 1, 3]].astype(np.float32),
            rng.uniform(0, 1, n).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int64))


def test_mask_head_matches_onnxruntime(onnx_check):
    no_detections = list(detections(5, 8, 8))
    no_detections[2][:] = 0.1  # every score below the threshold
    onnx_check(mask_head_model(), [list(detections(12, 10, 12)),   # more than MAX_DETECTIONS kept
                                   list(detections(6, 7, 5)),      # fewer
                                   no_detections])
