"""The ONNX operators of torchvision's SSD-lite and Faster R-CNN exports
(opset 11) whose output shapes depend on values: runtime K, shapes, pads,
sizes, slice bounds, and count-sized results (NonZero, NMS). Each small
model is imported with shapefn.from_onnx and compiled once, then run at
several shapes and values (zero-size results included) on a strict sim and
on opencl (the ``onnx_check`` fixture runs each test on both) and compared
with onnxruntime, the counters on opencl equal to those on sim."""
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_onnx_ops import GROUPS, cases, i64, model, node, uniform

from conftest import DEVICES

# onnx_check runs these on every device: sizes from run-time values read back from the device.
ONNX_CHECK_DEVICES = DEVICES

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
rng = np.random.default_rng(1)
INT64_MAX = 2 ** 63 - 1


def shape_dim(x, axis, out):
    """``Unsqueeze(Gather(Shape(x), axis), [0])``: one dimension as a 1-D int64 value."""
    return [node("Shape", [x], [f"{out}_s"]), node("Gather", [f"{out}_s", f"{out}_i"], [f"{out}_g"], axis=0),
            node("Unsqueeze", [f"{out}_g"], [out], axes=[0])], {f"{out}_i": np.int64(axis)}


def topk_cases():
    yield "TopK-runtime-k", model([node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=1, sorted=1)],
                             [("x", F, [1, "N"]), ("k", I64, [1])], [("v", F, None), ("i", I64, None)]), \
        [[uniform((1, 10)), i64(4)], [uniform((1, 5)), i64(0)], [uniform((1, 6)), i64(6)]]
    # largest other than 0 and 1 (found by fuzzing): only 1 picks the largest, as onnxruntime reads it
    for k, name in ((i64(3), "runtime-k"), (None, "constant-k")):
        yield f"TopK-{name}-largest7", model(
            [node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=7, sorted=1)],
            [("x", F, [1, "N"])] + ([("k", I64, [1])] if k is not None else []), [("v", F, None), ("i", I64, None)],
            {} if k is not None else {"k": i64(3)}), \
            [[uniform((1, n))] + ([k] if k is not None else []) for n in (10, 3)]
    # SSD-lite per class: scores above a threshold (NonZero -> GatherND), then
    # the best min(count, 3) of them (K = ReduceMin(Concat([3], count))).
    nodes, inits = shape_dim("kept", 0, "count")
    yield "TopK-k-from-count", model(
        [node("Greater", ["x", "t"], ["m"]), node("NonZero", ["m"], ["nz"]),
         node("Transpose", ["nz"], ["idx"], perm=[1, 0]), node("GatherND", ["x", "idx"], ["kept"]), *nodes,
         node("Concat", ["top", "count"], ["c"], axis=0),
         node("ReduceMin", ["c"], ["k0"], keepdims=0), node("Reshape", ["k0", "one"], ["k"]),
         node("TopK", ["kept", "k"], ["v", "i"], axis=-1, largest=1, sorted=1),
         node("Gather", ["kept", "i"], ["g"], axis=0)],
        [("x", F, ["N"])], [("v", F, None), ("i", I64, None), ("g", F, None)],
        {"t": np.float32(0.5), "top": i64(3), "one": i64(1), **inits}), \
        [[uniform(n, 0, 1)] for n in (12, 4, 0)] + [[np.zeros(5, np.float32)]]


def reshape_cases():
    yield "Reshape-runtime-shape", model([node("Reshape", ["x", "s"], ["y"])], [("x", F, ["N", 6]), ("s", I64, [3])],
                                         [("y", F, None)]), \
        [[uniform((2, 6)), i64(3, -1, 2)], [uniform((4, 6)), i64(0, 3, -1)], [uniform((0, 6)), i64(0, 5, 2)]]
    # The heads: [N, A*4, H, W] -> [N, -1, 4, H, W] -> [N, H, W, A, 4] -> [N, -1, 4].
    dims = [shape_dim("x", a, f"d{a}") for a in (0, 2, 3)]
    yield "Reshape-Shape-Gather-Concat", model(
        [*(n for nodes, _ in dims for n in nodes),
         node("Concat", ["d0", "m1", "four", "d2", "d3"], ["s5"], axis=0), node("Reshape", ["x", "s5"], ["r"]),
         node("Transpose", ["r"], ["t"], perm=[0, 3, 4, 1, 2]),
         node("Concat", ["d0", "m1", "four"], ["s3"], axis=0), node("Reshape", ["t", "s3"], ["y"])],
        [("x", F, ["N", 12, "H", "W"])], [("y", F, None)],
        {"m1": i64(-1), "four": i64(4), **{k: v for _, i in dims for k, v in i.items()}}), \
        [[uniform((n, 12, h, w))] for n, h, w in ((1, 3, 5), (2, 2, 1), (1, 0, 4))]
    yield "Reshape-constant", model([node("Reshape", ["x", "s"], ["y"])], [("x", F, ["N", 15, 4])], [("y", F, None)],
                                    {"s": i64(-1, 4)}), [[uniform((n, 15, 4))] for n in (2, 0)]


def expand_cases():
    # Faster R-CNN's level index [R, 1, 1, 1] expanded to the pooled features' shape.
    yield "Expand-runtime-shape", model(
        [node("Reshape", ["i", "s4"], ["r"]), node("Expand", ["r", "shape"], ["y"])],
        [("i", I64, ["R"]), ("shape", I64, [4])], [("y", I64, None)], {"s4": i64(-1, 1, 1, 1)}), \
        [[i64(3, 0, 2), i64(3, 2, 7, 7)], [i64(5), i64(1, 4, 2, 3)], [np.zeros(0, np.int64), i64(0, 2, 7, 7)],
         [i64(7), i64(3, 2, 2, 2)]]  # R = 1 broadcast to 3
    # MultiScaleRoIAlign: index.view(-1, 1, 1, 1).expand(R, C, 7, 7), exported
    # with torch's -1 rule as Where(Equal(shape, -1), 1, shape).
    dims = [shape_dim("r", 0, "d0"), *(shape_dim("u", a, f"d{a}") for a in (1, 2, 3))]
    yield "Expand-Where-shape", model(
        [node("Reshape", ["idx", "s4"], ["r"]), *(n for nodes, _ in dims for n in nodes),
         node("Concat", ["d0", "d1", "d2", "d3"], ["s"], axis=0), node("Shape", ["s"], ["ss"]),
         node("ConstantOfShape", ["ss"], ["ones"], value=numpy_helper.from_array(i64(1))),
         node("Mul", ["ones", "minus1"], ["neg"]), node("Equal", ["s", "neg"], ["eq"]),
         node("Where", ["eq", "ones", "s"], ["shape"]), node("Expand", ["r", "shape"], ["y"])],
        [("idx", I64, ["R"]), ("u", F, ["R", 3, 7, 7])], [("y", I64, None)],
        {"s4": i64(-1, 1, 1, 1), "minus1": np.int64(-1), **{k: v for _, i in dims for k, v in i.items()}}), \
        [[rng.integers(0, 9, r), uniform((r, 3, 7, 7))] for r in (4, 1, 0)]
    # Faster R-CNN: a row [1, M] expanded to Shape(y) [N, M], N at times 1.
    yield "Expand-to-Shape", model([node("Shape", ["b"], ["s"]), node("Expand", ["a", "s"], ["y"])],
                                   [("a", I64, [1, "M"]), ("b", F, ["N", "M"])], [("y", I64, None)]), \
        [[rng.integers(0, 9, (1, m)), uniform((n, m))] for n, m in ((4, 3), (1, 5), (3, 1), (0, 2))]
    # The anchor grid: centers [H, 1] and [1, W] expanded to Concat(Shape, Shape).
    yield "Expand-meshgrid", model(
        [node("Shape", ["h"], ["sh"]), node("Shape", ["w"], ["sw"]), node("Concat", ["sh", "sw"], ["s"], axis=0),
         node("Reshape", ["h", "col"], ["hc"]), node("Expand", ["hc", "s"], ["y"]), node("Expand", ["w", "s"], ["z"])],
        [("h", F, ["H"]), ("w", F, ["W"])], [("y", F, None), ("z", F, None)], {"col": i64(-1, 1)}), \
        [[uniform(h), uniform(w)] for h, w in ((3, 4), (1, 5), (2, 1))]
    # SSD-lite: constant anchor sizes expanded to ConstantOfShape(Shape(...)), then tiled per location.
    yield "ConstantOfShape-Expand-Tile", model(
        [node("Shape", ["x"], ["s"]), node("Gather", ["s", "two"], ["h"], axis=0),
         node("Gather", ["s", "three"], ["w"], axis=0), node("Mul", ["h", "w"], ["hw"]),
         node("Unsqueeze", ["hw"], ["hw1"], axes=[0]), node("Concat", ["hw1", "one"], ["reps"], axis=0),
         node("Shape", ["reps"], ["rs"]),
         node("ConstantOfShape", ["rs"], ["ones"], value=numpy_helper.from_array(i64(1))),
         node("Expand", ["sizes", "ones"], ["e"]), node("Tile", ["e", "reps"], ["y"])],
        [("x", F, [1, 3, "H", "W"])], [("y", F, None)],
        {"two": np.int64(2), "three": np.int64(3), "one": i64(1), "sizes": uniform((6, 2), 0, 1)}), \
        [[uniform((1, 3, h, w))] for h, w in ((2, 3), (1, 1), (0, 4))]


def value_shape_cases():
    yield "Tile-runtime-repeats", model([node("Tile", ["x", "r"], ["y"])], [("x", F, ["N", 4]), ("r", I64, [2])],
                                        [("y", F, None)]), \
        [[uniform((2, 4)), i64(3, 1)], [uniform((3, 4)), i64(1, 2)], [uniform((2, 4)), i64(0, 1)]]
    yield "ConstantOfShape-runtime", model(
        [node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(i64(0)))],
        [("s", I64, [1])], [("y", I64, None)]), [[i64(4)], [i64(0)], [i64(2)]]
    # Faster R-CNN's pooled-feature buffer: zeros of Concat([R], [C, 7, 7]).
    nodes, inits = shape_dim("rois", 0, "r")
    yield "ConstantOfShape-from-Concat", model(
        [*nodes, node("Concat", ["r", "chw"], ["s"], axis=0),
         node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(np.zeros(1, np.float32)))],
        [("rois", F, ["R", 4])], [("y", F, None)], {"chw": i64(3, 7, 7), **inits}), \
        [[uniform((n, 4))] for n in (5, 0)]
    yield "ConstantOfShape-from-Sub", model(
        [node("Sub", ["eight", "n"], ["s"]),
         node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(i64(0)))],
        [("n", I64, [1])], [("y", I64, None)], {"eight": i64(8)}), [[i64(2)], [i64(8)], [i64(5)]]
    # The anchor generator: Range(0, Cast(Gather(Shape(feature), 2)), 1).
    nodes, inits = shape_dim("x", 2, "h")
    yield "Range-from-shape", model(
        [*nodes[:2], node("Cast", ["h_g"], ["h"], to=I64), node("Range", ["zero", "h", "one"], ["y"])],
        [("x", F, [1, 3, "H", "W"])], [("y", I64, None)], {"zero": np.int64(0), "one": np.int64(1), **inits}), \
        [[uniform((1, 3, h, 2))] for h in (5, 1, 0)]
    yield "Range-runtime", model([node("Range", ["a", "b", "d"], ["y"])], [("a", I64, []), ("b", I64, []),
                                                                         ("d", I64, [])], [("y", I64, None)]), \
        [[np.array(a, np.int64), np.array(b, np.int64), np.array(d, np.int64)] for a, b, d in
         ((0, 5, 1), (2, 11, 3), (4, 4, 1), (6, 0, -2))]
    yield "Range-float", model([node("Range", ["a", "b", "d"], ["y"])], [("b", F, [])], [("y", F, None)],
                               {"a": np.float32(0.5), "d": np.float32(1.0)}), \
        [[np.array(b, np.float32)] for b in (4.0, 0.5, 7.25)]


def pad_resize_cases():
    # The transform's batching: pads from runtime values (Cast to int64), constant 0.
    yield "Pad-runtime-pads", model([node("Pad", ["x", "p"], ["y"], mode="constant")],
                                    [("x", F, [3, "H", "W"]), ("p", I64, [6])], [("y", F, None)]), \
        [[uniform((3, 4, 5)), i64(0, 0, 0, 0, 2, 3)], [uniform((3, 2, 2)), i64(0, 0, 0, 0, 0, 0)],
         [uniform((3, 1, 3)), i64(0, 1, 0, 0, 4, 1)]]
    yield "Pad-runtime-value", model([node("Pad", ["x", "p", "v"], ["y"], mode="constant")],
                                     [("x", F, ["H", "W"]), ("p", I64, [4]), ("v", F, [])], [("y", F, None)]), \
        [[uniform((2, 3)), i64(1, 0, 0, 2), np.array(-1.5, np.float32)], [uniform((0, 3)), i64(0, 0, 2, 1),
                                                                           np.array(7, np.float32)]]
    # Split into parts whose sizes are an input (read by shapefn.split_sizes), an empty part among them.
    yield "Split-runtime-sizes", model([node("Split", ["x", "s"], ["a", "b", "c"], axis=1)],
                                       [("x", F, [2, "W"]), ("s", I64, [3])],
                                       [("a", F, None), ("b", F, None), ("c", F, None)], opset=18), \
        [[uniform((2, 6)), i64(1, 2, 3)], [uniform((2, 4)), i64(0, 4, 0)]]
    # Pads for the listed axes only (opset 18): constant axes, negative ones too, runtime pads.
    yield "Pad-axes", model([node("Pad", ["x", "p", "", "axes"], ["y"], mode="edge")],
                            [("x", F, [2, "H", "W"]), ("p", I64, [4])], [("y", F, None)], {"axes": i64(-1, 1)},
                            opset=18), \
        [[uniform((2, 3, 4)), i64(1, 0, 2, 1)], [uniform((2, 1, 2)), i64(0, 3, 0, 0)]]
    # Wrap (opset 19), cropping one axis and wrapping the other around.
    yield "Pad-wrap", model([node("Pad", ["x", "p"], ["y"], mode="wrap")], [("x", F, ["H", 3])], [("y", F, None)],
                            {"p": i64(1, -1, 2, 2)}, opset=19), [[uniform((4, 3))], [uniform((3, 3))]]
    # torch's F.pad as exported: Concat(pads, zeros) -> [-1, 2] -> reversed ->
    # transposed -> flat ONNX pads, from a runtime [left, right, top, bottom].
    yield "Pad-torch-chain", model(
        [node("Shape", ["p"], ["ps"]), node("Sub", ["six", "ps"], ["nz"]),
         node("ConstantOfShape", ["nz"], ["z"], value=numpy_helper.from_array(i64(0))),
         node("Concat", ["p", "z"], ["c"], axis=0), node("Reshape", ["c", "pairs"], ["r"]),
         node("Slice", ["r", "m1", "end", "zero", "m1"], ["rev"]), node("Transpose", ["rev"], ["t"], perm=[1, 0]),
         node("Reshape", ["t", "m1"], ["flat"]), node("Cast", ["flat"], ["pads"], to=I64),
         node("Pad", ["x", "pads"], ["y"], mode="constant")],
        [("x", F, [3, "H", "W"]), ("p", I64, [4])], [("y", F, None)],
        {"six": i64(6), "pairs": i64(-1, 2), "m1": i64(-1), "end": i64(-INT64_MAX), "zero": i64(0)}), \
        [[uniform((3, 5, 6)), i64(0, 2, 0, 3)], [uniform((3, 4, 4)), i64(0, 0, 0, 0)],
         [uniform((3, 1, 2)), i64(1, 0, 2, 0)]]
    # The transform's resize: sizes = Concat(Shape(x)[0:2], runtime (h, w)), linear.
    yield "Resize-linear-sizes", model(
        [node("Shape", ["x"], ["s"]), node("Slice", ["s", "b", "e", "a"], ["nc"]),
         node("Concat", ["nc", "hw"], ["sizes"], axis=0),
         node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="linear",
              coordinate_transformation_mode="half_pixel", nearest_mode="floor", cubic_coeff_a=-0.75)],
        [("x", F, [1, 3, "H", "W"]), ("hw", I64, [2])], [("y", F, None)],
        {"b": i64(0), "e": i64(2), "a": i64(0), "roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32)}), \
        [[uniform((1, 3, 6, 5)), i64(8, 7)], [uniform((1, 3, 8, 8)), i64(3, 5)], [uniform((1, 3, 4, 4)), i64(4, 4)]]
    # FPN's top-down path: nearest/asymmetric/floor to the lateral feature's
    # size, Concat(Shape(x)[0:2], Cast(Concat(Gather(Shape(lat), 2), Gather(Shape(lat), 3)))).
    dims = [shape_dim("lat", a, f"d{a}") for a in (2, 3)]
    yield "Resize-nearest-to-shape", model(
        [node("Shape", ["x"], ["s"]), node("Slice", ["s", "b", "e", "a"], ["nc"]),
         *(n for nodes, _ in dims for n in nodes), node("Concat", ["d2", "d3"], ["hw"], axis=0),
         node("Cast", ["hw"], ["hw64"], to=I64), node("Concat", ["nc", "hw64"], ["sizes"], axis=0),
         node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
        [("x", F, [1, 4, "H", "W"]), ("lat", F, [1, 4, "H2", "W2"])], [("y", F, None)],
        {"b": i64(0), "e": i64(2), "a": i64(0), "roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
         **{k: v for _, i in dims for k, v in i.items()}}), \
        [[uniform((1, 4, h, w)), uniform((1, 4, h2, w2))] for h, w, h2, w2 in ((3, 5, 6, 10), (2, 2, 3, 4))]


def slice_cases():
    # Faster R-CNN: scores[:, :n + 1] and boxes[:n + 1] with n computed at run time.
    yield "Slice-runtime-end", model(
        [node("Add", ["n", "one"], ["end"]), node("Slice", ["x", "zero", "end", "axes"], ["y"])],
        [("x", F, ["N", 91]), ("n", I64, [1])], [("y", F, None)], {"one": i64(1), "zero": i64(0), "axes": i64(1)}), \
        [[uniform((3, 91)), i64(4)], [uniform((2, 91)), i64(0)], [uniform((0, 91)), i64(90)],
         [uniform((1, 91)), i64(-1)]]
    yield "Slice-runtime-all", model([node("Slice", ["x", "b", "e", "a", "st"], ["y"])],
                                     [("x", F, ["N", "M"]), ("b", I64, [1]), ("e", I64, [1]), ("a", I64, [1]),
                                      ("st", I64, [1])], [("y", F, None)]), \
        [[uniform((5, 6)), i64(1), i64(4), i64(0), i64(1)],
         [uniform((5, 6)), i64(-1), i64(-INT64_MAX), i64(1), i64(-2)],
         [uniform((3, 4)), i64(2), i64(1), i64(1), i64(1)], [uniform((4, 2)), i64(0), i64(INT64_MAX), i64(0), i64(3)]]
    # The transform's reversal of pads: [::-1] along axis 0.
    yield "Slice-reverse", model([node("Slice", ["x", "b", "e", "a", "st"], ["y"])], [("x", I64, ["N", 2])],
                                 [("y", I64, None)],
                                 {"b": i64(-1), "e": i64(-INT64_MAX), "a": i64(0), "st": i64(-1)}), \
        [[rng.integers(0, 9, (n, 2))] for n in (3, 1, 0)]
    # The box coder: boxes[:, 0::4], boxes[:, 1::2].
    yield "Slice-step", model([node("Slice", ["x", "b", "e", "a", "st"], ["y"]),
                               node("Slice", ["x", "b1", "e", "a", "st2"], ["z"])],
                              [("x", F, ["N", 8])], [("y", F, None), ("z", F, None)],
                              {"b": i64(0), "b1": i64(1), "e": i64(INT64_MAX), "a": i64(1), "st": i64(4),
                               "st2": i64(2)}), \
        [[uniform((n, 8))] for n in (3, 0)]
    yield "Slice-of-Shape", model([node("Shape", ["x"], ["s"]), node("Slice", ["s", "b", "e", "a", "st"], ["y"])],
                                  [("x", F, [3, "H", "W"])], [("y", I64, None)],
                                  {"b": i64(-2), "e": i64(INT64_MAX), "a": i64(0), "st": i64(1)}), \
        [[uniform((3, h, w))] for h, w in ((4, 6), (0, 3))]


def count_sized_cases():
    yield "NonZero-1d", model([node("Greater", ["x", "t"], ["m"]), node("NonZero", ["m"], ["y"])],
                              [("x", F, ["N"])], [("y", I64, None)], {"t": np.float32(0.0)}), \
        [[uniform(9)], [-np.ones(4, np.float32)], [uniform(0)], [np.ones(3, np.float32)]]
    yield "NonZero-2d", model([node("Not", ["m"], ["nm"]), node("NonZero", ["nm"], ["y"])],
                              [("m", B, ["N", "M"])], [("y", I64, None)]), \
        [[rng.random((4, 3)) < 0.5], [np.ones((2, 5), bool)], [np.zeros((0, 3), bool)]]
    # of a scalar: as of one element (found by fuzzing)
    yield "NonZero-scalar", model([node("Greater", ["x", "t"], ["m"]), node("NonZero", ["m"], ["y"])],
                                  [("x", F, [])], [("y", I64, None)], {"t": np.float32(0.0)}), \
        [[np.array(2.0, np.float32)], [np.array(-1.0, np.float32)]]
    yield "GatherND-of-NonZero", model(
        [node("Greater", ["x", "t"], ["m"]), node("NonZero", ["m"], ["nz"]),
         node("Transpose", ["nz"], ["idx"], perm=[1, 0]), node("GatherND", ["x", "idx"], ["y"])],
        [("x", F, ["N", "C"])], [("y", F, None)], {"t": np.float32(0.0)}), \
        [[uniform((4, 3))], [-np.ones((2, 3), np.float32)], [uniform((1, 5))]]
    yield "GatherND-runtime", model([node("GatherND", ["x", "i"], ["y"])], [("x", F, ["N", 3]), ("i", I64, ["K", 1])],
                                    [("y", F, None)]), \
        [[uniform((5, 3)), i64(4, 0, 4).reshape(3, 1)], [uniform((2, 3)), np.zeros((0, 1), np.int64)]]


def nms_model(limits=()):
    """torchvision's batched NMS: max_output INT64_MAX, IoU threshold 0.5, no
    score threshold; ``limits`` names the ones given as runtime inputs instead."""
    consts = {"m": i64(INT64_MAX), "iou": np.array([0.5], np.float32)}
    dtypes = {"m": I64, "iou": F, "t": F}
    return model([node("NonMaxSuppression", ["b", "s", "m", "iou", *(["t"] if "t" in limits else [])], ["y"])],
                 [("b", F, [1, "N", 4]), ("s", F, [1, "C", "N"]), *((k, dtypes[k], [1]) for k in limits)],
                 [("y", I64, None)], {k: v for k, v in consts.items() if k not in limits})


def boxes(n, c=1):
    """Overlapping boxes and distinct scores in [0, 1) (one of them 0)."""
    xy = rng.uniform(0, 30, (n, 2))
    wh = rng.uniform(10, 40, (n, 2))
    scores = rng.permutation(n * c).reshape(1, c, n) / max(n * c, 1)
    return np.concatenate([xy, xy + wh], 1)[None].astype(np.float32), scores.astype(np.float32)


def nms_cases():
    yield "NMS", nms_model(), [list(boxes(n)) for n in (12, 1, 0)]
    yield "NMS-classes", nms_model(), [list(boxes(n, 3)) for n in (10, 0)]
    center = model([node("NonMaxSuppression", ["b", "s", "m", "iou"], ["y"], center_point_box=1)],
                   [("b", F, [1, "N", 4]), ("s", F, [1, 1, "N"])], [("y", I64, None)],
                   {"m": i64(INT64_MAX), "iou": np.array([0.4], np.float32)})
    yield "NMS-center-boxes", center, [[np.concatenate([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], -1), s]
                                       for b, s in (boxes(n) for n in (12, 0))]
    yield "NMS-runtime-limits", nms_model(("m", "iou", "t")), \
        [[*boxes(10), i64(3), np.array([0.3], np.float32), np.array([0.5], np.float32)],
         [*boxes(10, 2), i64(INT64_MAX), np.array([0.7], np.float32), np.array([-1], np.float32)],
         [*boxes(6), i64(5), np.array([0.5], np.float32), np.array([2.0], np.float32)],  # no survivors
         [*boxes(6), i64(0), np.array([0.5], np.float32), np.array([0.0], np.float32)]]


def roi_cases():
    c = 3
    pooled = lambda r: rng.permutation(r).astype(np.int64)  # noqa: E731
    feature = lambda h, w: uniform((1, c, h, w))  # noqa: E731
    rois = lambda r: np.sort(rng.uniform(0, 300, (r, 2, 2)), 1).reshape(r, 4).astype(np.float32)  # noqa
    yield "RoiAlign", model(
        [node("Cast", ["bi"], ["bi64"], to=I64),
         node("RoiAlign", ["x", "rois", "bi64"], ["y"], output_height=7, output_width=7, sampling_ratio=2,
              spatial_scale=0.03125)],
        [("x", F, [1, c, "H", "W"]), ("rois", F, ["R", 4]), ("bi", F, ["R"])], [("y", F, None)]), \
        [[feature(10, 8), rois(5), np.zeros(5, np.float32)], [feature(6, 12), rois(1), np.zeros(1, np.float32)],
         [feature(4, 4), rois(0), np.zeros(0, np.float32)]]
    # MultiScaleRoIAlign: per-level results scattered into zeros at their ROI indices.
    yield "ScatterElements", model(
        [node("Shape", ["zeros_like"], ["s"]),
         node("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
         node("Reshape", ["idx", "s4"], ["r"]), node("Shape", ["u"], ["us"]), node("Expand", ["r", "us"], ["e"]),
         node("ScatterElements", ["z", "e", "u"], ["y"], axis=0)],
        [("zeros_like", F, ["M", c, 7, 7]), ("idx", I64, ["R"]), ("u", F, ["R", c, 7, 7])], [("y", F, None)],
        {"s4": i64(-1, 1, 1, 1)}), \
        [[uniform((m, c, 7, 7)), pooled(m)[:r], uniform((r, c, 7, 7))] for m, r in ((6, 4), (3, 3), (2, 0))]


def if_cases():
    """torchvision's batched NMS: an empty result when there are no boxes, else
    NMS over boxes offset per class; the kept indices sliced to a maximum."""
    empty = helper.make_graph([node("Constant", [], ["none"], value=numpy_helper.from_array(np.zeros(0, np.int64)))],
                              "then", [], [helper.make_tensor_value_info("none", I64, None)])
    nms = helper.make_graph(
        [node("ReduceMax", ["boxes"], ["mx"], keepdims=0), node("Cast", ["idxs"], ["fi"], to=F),
         node("Add", ["mx", "onef"], ["mx1"]), node("Mul", ["fi", "mx1"], ["off"]),
         node("Unsqueeze", ["off"], ["off1"], axes=[1]), node("Add", ["boxes", "off1"], ["bn"]),
         node("Unsqueeze", ["bn"], ["b3"], axes=[0]), node("Unsqueeze", ["scores"], ["s2"], axes=[0]),
         node("Unsqueeze", ["s2"], ["s3"], axes=[0]),
         node("NonMaxSuppression", ["b3", "s3", "maxo", "iou"], ["sel"]),
         node("Gather", ["sel", "two"], ["g"], axis=1), node("Squeeze", ["g"], ["keep"], axes=[1])],
        "else", [], [helper.make_tensor_value_info("keep", I64, None)],
        [numpy_helper.from_array(v, k) for k, v in {"onef": np.float32(1), "maxo": i64(INT64_MAX),
                                                   "iou": np.array([0.5], np.float32), "two": i64(2)}.items()])
    m = model([node("Shape", ["boxes"], ["s"]), node("ReduceProd", ["s"], ["p"], keepdims=0),
               node("Equal", ["p", "zero"], ["eq"]), node("Cast", ["eq"], ["c"], to=B),
               node("If", ["c"], ["kept"], then_branch=empty, else_branch=nms),
               node("Slice", ["kept", "z1", "top", "z1"], ["y"])],
              [("boxes", F, ["N", 4]), ("scores", F, ["N"]), ("idxs", I64, ["N"])], [("y", I64, None)],
              {"zero": np.int64(0), "z1": i64(0), "top": i64(5)})
    feeds = []
    for n in (12, 3, 0):
        b, s = boxes(n)
        feeds.append([b[0], s[0, 0], rng.integers(0, 3, n)])
    yield "If-batched-NMS", m, feeds


VALUE_SHAPED = cases(topk_cases, reshape_cases, expand_cases, value_shape_cases, pad_resize_cases, slice_cases)
COUNT_SIZED = cases(count_sized_cases, nms_cases, roi_cases, if_cases)


@pytest.mark.parametrize("case", VALUE_SHAPED)
def test_value_shaped(onnx_check, case):
    onnx_check(*VALUE_SHAPED[case])


# RoiAlign averages 4 bilinear samples of 4 values each: float32 rounding in
# another order than onnxruntime's (with or without fused multiply-adds)
# differs by up to ~2e-6 on values of magnitude 1.
_ATOL = {"RoiAlign": 1e-5}


@pytest.mark.parametrize("case", COUNT_SIZED)
def test_count_sized_and_control_flow(onnx_check, case):
    onnx_check(*COUNT_SIZED[case], atol=_ATOL.get(case, 1e-6))


def test_range_of_float16_matches_onnxruntime():
    """Half-precision Range bounds given at run time: the length computed
    in half precision, as onnxruntime computes it. On sim (PoCL's CPU
    device has no half precision)."""
    import onnxruntime as ort

    import shapefn
    from shapefn.frontend import from_onnx

    half = TensorProto.FLOAT16
    m = model([node("Range", ["a", "b", "d"], ["y"])], [("a", half, []), ("b", half, []), ("d", half, [])],
              [("y", half, None)], opset=27)
    m.ir_version = 13
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), "sim"), shapefn.sim(strict=True))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b, d in ((1.0, 5.5, 0.7), (0.1, 0.1, 1.0), (9.0, -2.0, -3.3), (0.0, 1.0, 0.001)):
        args = [np.array(v, np.float16) for v in (a, b, d)]
        np.testing.assert_array_equal(vm(*args).numpy(), session.run(None, dict(zip("abd", args)))[0])


def op_types(graph):
    for n in graph.node:
        yield n.op_type
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from op_types(a.g)


def test_every_detection_model_op_is_covered():
    """Every operator of the detection exports in tests/data, subgraphs
    included, is in some case above (the transformers' are test_transformers.py's,
    the recognizer's test_recognizer.py's)."""
    tested = {op for group in (*GROUPS, VALUE_SHAPED, COUNT_SIZED)
              for m, _ in group.values() for op in op_types(m.graph)}
    paths = sorted(p for p in pathlib.Path(__file__).parent.joinpath("data").glob("*.graph.onnx")
                   if not p.name.startswith(("bert_", "gpt2_", "crnn_")))
    assert paths
    for path in paths:
        used = set(op_types(onnx.load(path).graph))
        assert used <= tested, (path.name, sorted(used - tested))
