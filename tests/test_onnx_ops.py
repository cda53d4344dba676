"""The ONNX operators of torchvision's detection exports in tests/data
(SSD-lite and Faster R-CNN at opset 11; RetinaNet, FCOS, SSD300, Keypoint
and Mask R-CNN at opsets 11 and 17), one small model each, used the way
those models use them: imported with shapefn.from_onnx, compiled once, run
at several shapes or values on a strict sim and on opencl (the
``onnx_check`` fixture runs each test on both, the counters on opencl equal
to those on sim) and compared with onnxruntime. Element-wise, layout and
network ops here; ops whose shapes come from values in
test_onnx_ops_dynamic.py."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import shapefn
from conftest import need_opencl, opencl
from shapefn.frontend import from_onnx

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
rng = np.random.default_rng(0)


def model(nodes, inputs, outputs, inits=(), opset=11):
    """An opset-11 model like the detection exports (or ``opset``).
    ``inputs``/``outputs`` are ``(name, elem_type, shape)``; ``inits`` maps
    names to numpy values."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=6 if opset == 11 else 8)


def i64(*values):
    return np.array(values, np.int64)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def uniform(shape, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def unary(op, lo=-3.0, hi=3.0, **attrs):
    m = model([node(op, ["x"], ["y"], **attrs)], [("x", F, ["N", 5])], [("y", F, None)])
    return m, [[uniform((n, 5), lo, hi)] for n in (3, 1, 0)]


def binary(op, dtype=F):
    """``x[N, 4] op c[4]`` and ``x[N, 4] op s`` (a scalar constant) like box arithmetic."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    c = np.array([1.5, 2.0, 3.0, 4.5] if dtype == F else [1, 2, 3, 4], np_dtype)
    m = model([node(op, ["x", "c"], ["y"]), node(op, ["x", "s"], ["z"])],
              [("x", dtype, ["N", 4])], [("y", dtype, None), ("z", dtype, None)],
              {"c": c, "s": np.array(2, np_dtype)})
    values = (lambda n: uniform((n, 4), 0.5, 9)) if dtype == F else (lambda n: rng.integers(0, 600, (n, 4)))
    return m, [[values(n)] for n in (5, 2, 0)]


def elementwise_cases():
    # The backbone's activations and the box coder's transforms.
    for op, lo, hi in (("Exp", -3, 3), ("Log", 0.1, 9), ("Sqrt", 0, 9), ("Reciprocal", 0.5, 9), ("Sigmoid", -3, 3),
                       ("Floor", -3, 3), ("Ceil", -3, 3), ("Relu", -3, 3), ("Identity", -3, 3)):
        yield op, *unary(op, lo, hi)
    yield "HardSigmoid", *unary("HardSigmoid", -8, 8, alpha=1 / 6)
    # NaN stays NaN (found by fuzzing: TVM's max and clip gave 0 and 1)
    yield "HardSigmoid-nan-alpha", *unary("HardSigmoid", alpha=float("nan"))
    for op in ("Relu", "Clip", "HardSigmoid"):
        m, feeds = unary(op)
        yield f"{op}-nan-input", m, [[np.where(np.arange(x.size).reshape(x.shape) % 2, x, np.nan).astype(np.float32)]
                               for (x,) in feeds]
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        yield f"{op}-float", *binary(op)
    for op in ("Add", "Sub", "Mul", "Div"):  # shape arithmetic
        yield f"{op}-int64", *binary(op, I64)
    for op in ("ReduceMax", "ReduceMin"):
        yield f"{op}-bool", model([node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", B, ["N", "M"])],
                                  [("y", B, None)], {"axes": i64(1)}, opset=20), \
            [[rng.random((4, 3)) < 0.5], [rng.random((1, 5)) < 0.5]]  # (the empty set: ONNX's node tests)
    # Converters of shapefn's own: LpNormalization (a zero row stays 0), EyeLike's dtype.
    for p_norm in (1, 2):
        m = model([node("LpNormalization", ["x"], ["y"], p=p_norm, axis=0)], [("x", F, ["N", 5])], [("y", F, None)])
        yield f"LpNormalization-p{p_norm}", m, [[np.vstack([uniform((3, 5)), np.zeros((1, 5), np.float32)])],
                                                 [uniform((1, 5))], [uniform((0, 5))]]
    yield "EyeLike-dtype", model([node("EyeLike", ["x"], ["y"], k=1, dtype=TensorProto.DOUBLE)],
                                 [("x", TensorProto.INT32, ["N", 4])], [("y", TensorProto.DOUBLE, None)]), \
        [[np.zeros((n, 4), np.int32)] for n in (3, 5, 0)]


def cases(*generators):
    """``name -> (model, feeds)`` from generators of ``(name, model, feeds)``."""
    return {name: (m, feeds) for gen in generators for name, m, feeds in gen()}


ELEMENTWISE = cases(elementwise_cases)


@pytest.mark.parametrize("source, target, values", [
    (F, TensorProto.INT32, uniform((2, 3))),
    (TensorProto.UINT16, TensorProto.INT16, np.array([[0, 1, 65535]], np.uint16)),
    (TensorProto.INT64, TensorProto.DOUBLE, np.array([[0, 1, -1, 2**62]], np.int64)),
    (B, TensorProto.UINT8, np.array([[True, False]])),
])
@pytest.mark.parametrize("device", ["sim", pytest.param("opencl", marks=opencl)])
def test_bit_cast_reads_the_same_bits(device, source, target, values):
    """Against numpy's view (onnxruntime 1.32 has no BitCast)."""
    if device == "opencl":
        need_opencl()
    m = model([node("BitCast", ["x"], ["y"], to=target)], [("x", source, ["N", None])], [("y", target, None)],
              opset=26)
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), device), device)
    want = values.view(helper.tensor_dtype_to_np_dtype(target))
    np.testing.assert_array_equal(vm(values).numpy().view(want.dtype), want)


def test_elu_of_float16_matches_onnxruntime():
    """On sim (PoCL's CPU device has no half precision): computed in float32
    and rounded once, as onnxruntime computes it."""
    import onnxruntime as ort

    half = TensorProto.FLOAT16
    m = model([node("Elu", ["x"], ["y"], alpha=0.5)], [("x", half, ["N", 5])], [("y", half, None)])
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), "sim"), shapefn.sim(strict=True))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 0):
        x = uniform((n, 5)).astype(np.float16)
        np.testing.assert_array_equal(vm(x).numpy(), session.run(None, {"x": x})[0])


@pytest.mark.parametrize("case", ELEMENTWISE)
def test_elementwise(onnx_check, case):
    onnx_check(*ELEMENTWISE[case])


def compare_cases():
    scores = lambda n: uniform((n,), -0.01, 0.1)  # noqa: E731
    yield "Greater", model([node("Greater", ["x", "t"], ["y"])], [("x", F, ["N"])], [("y", B, None)],
                           {"t": np.float32(0.001)}), [[scores(n)] for n in (7, 0)]
    yield "Less", model([node("Less", ["x", "t"], ["y"])], [("x", F, ["N"])], [("y", B, None)],
                        {"t": np.float32(0.05)}), [[scores(n)] for n in (7, 1)]
    yield "Equal", model([node("Equal", ["x", "z"], ["y"])], [("x", I64, ["N"])], [("y", B, None)],
                         {"z": np.int64(0)}), [[rng.integers(0, 3, n)] for n in (9, 0)]
    # A size compared with a constant: equal only at run time for an empty x.
    yield "Equal-shape", model([node("Shape", ["x"], ["s"]), node("Equal", ["s", "z"], ["y"])],
                               [("x", F, ["N", 3])], [("y", B, None)], {"z": i64(0, 3)}), \
        [[uniform((n, 3))] for n in (2, 0)]
    yield "Equal-shapes", model([node("Shape", ["a"], ["sa"]), node("Shape", ["b"], ["sb"]),
                                 node("Equal", ["sa", "sb"], ["y"])], [("a", F, ["N", 3]), ("b", F, ["M", 3])],
                                [("y", B, None)]), [[uniform((n, 3)), uniform((m, 3))] for n, m in ((2, 2), (2, 4))]
    yield "Not-And", model([node("Not", ["a"], ["na"]), node("Not", ["b"], ["nb"]), node("And", ["na", "nb"], ["y"])],
                           [("a", B, ["N"]), ("b", B, ["N"])], [("y", B, None)]), \
        [[rng.random(n) < 0.5, rng.random(n) < 0.5] for n in (8, 0)]
    # Faster R-CNN: the expanded shape where a dimension is -1 (Expand's "keep").
    yield "Where-int64", model([node("Equal", ["s", "m"], ["c"]), node("Where", ["c", "one", "s"], ["y"])],
                               [("s", I64, [4]), ("m", I64, [4])], [("y", I64, None)], {"one": np.ones(4, np.int64)}), \
        [[np.array([3, -1, 7, 7]), np.array([3, -1, 1, 1]) * -1], [np.array([-1, 2, -1, 5]), np.array([-1, 2, 1, 1])]]
    yield "Where-float", model([node("Where", ["c", "a", "b"], ["y"])], [("c", B, ["N", 1]), ("a", F, ["N", 4]),
                                                                         ("b", F, [4])], [("y", F, None)]), \
        [[rng.random((n, 1)) < 0.5, uniform((n, 4)), uniform(4)] for n in (6, 0)]


def broadcast_cases():
    """Operands whose sizes come from different values (batched NMS's
    ``boxes + offsets[:, None]``), equal or 1 only at run time."""
    yield "Add-unrelated-rows", model([node("Add", ["a", "b"], ["y"])], [("a", F, ["N", 4]), ("b", F, ["M", 1])],
                                      [("y", F, None)]), \
        [[uniform((n, 4)), uniform((m, 1))] for n, m in ((5, 5), (3, 1), (1, 4), (0, 0))]
    yield "Min-unrelated", model([node("Min", ["a", "b"], ["y"])], [("a", F, ["N"]), ("b", F, ["M"])],
                                 [("y", F, None)]), [[uniform(n), uniform(m)] for n, m in ((6, 6), (1, 3), (4, 1))]
    # (found by fuzzing: logical_xor was left without a kernel)
    yield "Xor-unrelated", model([node("Xor", ["a", "b"], ["y"])], [("a", B, ["N"]), ("b", B, [2])],
                                 [("y", B, None)]), [[rng.random(n) < 0.5, rng.random(2) < 0.5] for n in (2, 1)]
    yield "Mul-outer", model([node("Mul", ["a", "b"], ["y"])], [("a", I64, ["N", 1]), ("b", I64, [1, "M"])],
                             [("y", I64, None)]), [[rng.integers(0, 9, (n, 1)), rng.integers(0, 9, (1, m))]
                                                   for n, m in ((3, 4), (1, 2), (0, 5))]


def matmul_broadcast_cases():
    """MatMul whose batch sizes are unrelated (a literal against a size
    known at run time, as in ONNX's expanded Attention): broadcast where the
    run-time size is 1, equal otherwise."""
    yield "MatMul-batch-literal-and-symbol", model(
        [node("MatMul", ["a", "b"], ["y"])], [("a", F, [2, 3, "M", 4]), ("b", F, ["B", "H", 4, 5])],
        [("y", F, None)]), \
        [[uniform((2, 3, m, 4)), uniform((b, h, 4, 5))] for m, b, h in ((6, 2, 3), (1, 1, 3), (2, 2, 1), (3, 1, 1))]
    yield "MatMul-batch-ranks-differ", model(
        [node("MatMul", ["a", "b"], ["y"])], [("a", F, ["B", 3, 4]), ("b", F, [2, 1, 4, "N"])], [("y", F, None)]), \
        [[uniform((b, 3, 4)), uniform((2, 1, 4, n))] for b, n in ((5, 2), (1, 3), (1, 0))]


COMPARE = cases(compare_cases, broadcast_cases, matmul_broadcast_cases)


@pytest.mark.parametrize("case", COMPARE)
def test_compare_logic_broadcast(onnx_check, case):
    onnx_check(*COMPARE[case])


def cast_clip_cases():
    for src, to, values in ((F, I64, lambda n: uniform(n, -600, 600)), (I64, F, lambda n: rng.integers(-600, 600, n)),
                            (I64, I32, lambda n: rng.integers(0, 20000, n)),
                            (I32, I64, lambda n: rng.integers(0, 20000, n).astype(np.int32)),
                            (B, I64, lambda n: rng.random(n) < 0.5), (B, F, lambda n: rng.random(n) < 0.5),
                            (I64, B, lambda n: rng.integers(0, 3, n)), (F, F, lambda n: uniform(n))):
        name = "-".join(helper.tensor_dtype_to_np_dtype(t).name for t in (src, to))
        yield f"Cast-{name}", model([node("Cast", ["x"], ["y"], to=to)], [("x", src, ["N"])], [("y", to, None)]), \
            [[values(n)] for n in (6, 0)]
    f32 = np.float32
    for name, ins, inits in (("relu6", ["x", "lo", "hi"], {"lo": f32(0), "hi": f32(6)}),  # the backbone
                             ("max-only", ["x", "", "hi"], {"hi": f32(4.135166645)}),  # the box coder's clamp
                             ("min-only", ["x", "lo"], {"lo": f32(-1)}),
                             ("min-equals-max", ["x", "lo", "hi"], {"lo": f32(5), "hi": f32(5)})):  # FPN levels
        yield f"Clip-{name}", model([node("Clip", ins, ["y"])], [("x", F, ["N", 3])], [("y", F, None)], inits), \
            [[uniform((n, 3), -9, 9)] for n in (4, 0)]
    yield "Clip-runtime-bounds", model([node("Clip", ["x", "lo", "hi"], ["y"])],
                                       [("x", F, ["N", 3]), ("lo", F, []), ("hi", F, [])], [("y", F, None)]), \
        [[uniform((n, 3), -9, 9), np.array(lo, f32), np.array(hi, f32)] for n, lo, hi in ((4, -2, 3), (0, 1, 5))]
    # NaN stays NaN, a NaN bound is none (found by fuzzing: TVM's kernels made NaN a bound)
    nan_x = [[np.array([[np.nan, 1, -8], [7, np.nan, 2]], f32), np.array(lo, f32), np.array(hi, f32)]
             for lo, hi in ((0, 6), (np.nan, 3), (-1, np.nan))]
    yield "Clip-nan", model([node("Clip", ["x", "lo", "hi"], ["y"])],
                            [("x", F, ["N", 3]), ("lo", F, []), ("hi", F, [])], [("y", F, None)]), nan_x
    yield "Clip-opset6-nan", model([node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [("x", F, ["N", 3])],
                                   [("y", F, None)], opset=6), [args[:1] for args in nan_x[:1]]
    for op in ("Max", "Min"):
        yield f"{op}-nan", model([node(op, ["a", "b"], ["y"])], [("a", F, ["N"]), ("b", F, ["N"])], [("y", F, None)]), \
            [[np.array([np.nan, 1, np.nan, 2], f32), np.array([0, np.nan, np.nan, 3], f32)]]


CAST_CLIP = cases(cast_clip_cases)


@pytest.mark.parametrize("case", CAST_CLIP)
def test_cast_and_clip(onnx_check, case):
    onnx_check(*CAST_CLIP[case])


def reduce_cases():
    # K = min(number of anchors, pre_nms_top_n): ReduceMin over [Gather(Shape(x), 1), 150].
    yield "ReduceMin-of-shape", model(
        [node("Shape", ["x"], ["s"]), node("Gather", ["s", "one"], ["n"], axis=0),
         node("Unsqueeze", ["n"], ["n1"], axes=[0]), node("Concat", ["top", "n1"], ["c"], axis=0),
         node("ReduceMin", ["c"], ["y"], keepdims=0)],
        [("x", F, [1, "N"])], [("y", I64, None)], {"one": np.int64(1), "top": np.array([150], np.int64)}), \
        [[uniform((1, n))] for n in (400, 20, 0)]
    # The transform's min/max over the image's (H, W).
    for op in ("ReduceMin", "ReduceMax"):
        yield f"{op}-of-hw", model(
            [node("Shape", ["x"], ["s"]), node("Slice", ["s", "b", "e"], ["hw"]),
             node(op, ["hw"], ["y"], keepdims=0)],
            [("x", F, [3, "H", "W"])], [("y", I64, None)], {"b": np.array([-2]), "e": np.array([2 ** 63 - 1])}), \
            [[uniform((3, h, w))] for h, w in ((4, 6), (7, 2))]
    # batched NMS's max_coordinate: over every element of boxes [N, 4].
    yield "ReduceMax-all", model([node("ReduceMax", ["x"], ["y"], keepdims=0)], [("x", F, ["N", 4])],
                                 [("y", F, None)]), [[uniform((n, 4), 0, 320)] for n in (5, 1)]
    yield "ReduceMax-axis", model([node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], [("x", F, ["N", 4])],
                                  [("y", F, None)]), [[uniform((n, 4))] for n in (5, 0)]
    # keepdims other than 0 and 1 (found by fuzzing): only 1 keeps, as onnxruntime reads it
    yield "ReduceMax-keepdims2", model([node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=2)],
                                       [("x", F, ["N", 4])], [("y", F, None)]), [[uniform((n, 4))] for n in (5, 2)]
    # Over nothing, known only at run time (found by fuzzing: the output was
    # left unwritten, -FLT_MAX for -inf, a mean of 0 / 0)
    for op in ("ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum", "ReduceProd"):
        for dtype, values in ((F, uniform), (I64, lambda shape: rng.integers(-9, 9, shape))):
            for name, attrs in (("all", {}), ("axis0", {"axes": [0]})):
                yield f"{op}-{name}-over-nothing-{helper.tensor_dtype_to_np_dtype(dtype)}", model(
                    [node(op, ["x"], ["y"], keepdims=0, **attrs)], [("x", dtype, ["N", 4])], [("y", dtype, None)]), \
                    [[values((n, 4))] for n in (0, 3)]
    # Rows of -inf (a fully masked attention row) and of the extreme finite
    # floats: TVM's float max starts from the lowest finite value.
    lowest, highest = np.finfo(np.float32).min, np.finfo(np.float32).max
    extremes = np.array([[-np.inf] * 4, [-np.inf, lowest, -np.inf, -np.inf], [np.inf] * 4,
                         [np.inf, highest, np.inf, -np.inf], [1.0, -np.inf, np.inf, 2.0]], np.float32)
    for op in ("ReduceMax", "ReduceMin"):
        yield f"{op}-of-infinities", model([node(op, ["x"], ["y"], axes=[1], keepdims=0)], [("x", F, ["N", 4])],
                                           [("y", F, None)]), [[extremes], [extremes[:2]]]
    # an empty axes list: as absent (all axes), as onnxruntime reads it (TVM's importer refused it)
    empty_axes = node("ReduceMax", ["x"], ["y"], keepdims=0)
    empty_axes.attribute.append(helper.make_attribute("axes", [], attr_type=onnx.AttributeProto.INTS))
    yield "ReduceMax-empty-axes-list", model([empty_axes], [("x", F, ["N", 4])], [("y", F, None)]), \
        [[uniform((n, 4))] for n in (3, 0)]
    # The If condition: ReduceProd(Shape(boxes)) == 0.
    yield "ReduceProd-of-shape", model(
        [node("Shape", ["x"], ["s"]), node("ReduceProd", ["s"], ["p"], keepdims=0),
         node("Equal", ["p", "z"], ["y"])],
        [("x", F, ["N", 4])], [("y", B, None)], {"z": np.int64(0)}), [[uniform((n, 4))] for n in (3, 0)]
    yield "ReduceProd-value", model([node("ReduceProd", ["x"], ["y"], keepdims=0)], [("x", I64, ["N"])],
                                    [("y", I64, None)]), [[rng.integers(1, 9, n)] for n in (4, 1)]


REDUCES = cases(reduce_cases)


@pytest.mark.parametrize("case", REDUCES)
def test_reduce(onnx_check, case):
    onnx_check(*REDUCES[case])


def network_cases():
    c = 8
    w3 = (rng.standard_normal((c, 1, 3, 3)) / 3).astype(np.float32)
    w1 = (rng.standard_normal((16, c, 1, 1)) / 3).astype(np.float32)
    bias = uniform(c, -0.1, 0.1)
    images = [[uniform((1, c, h, w))] for h, w in ((10, 14), (7, 5), (1, 1))]
    yield "Conv-depthwise", model(
        [node("Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2],
              dilations=[1, 1])], [("x", F, [1, c, "H", "W"])], [("y", F, None)], {"w": w3, "b": bias}), images
    yield "Conv-pointwise", model(
        [node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1])],
        [("x", F, ["N", c, "H", "W"])], [("y", F, None)], {"w": w1}), \
        [[uniform((n, c, h, w))] for n, h, w in ((2, 5, 6), (1, 3, 3))]
    yield "Conv-5x5", model(
        [node("Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])],
        [("x", F, [1, c, "H", "W"])], [("y", F, None)],
        {"w": (rng.standard_normal((c, 1, 5, 5)) / 5).astype(np.float32), "b": bias}), images
    yield "Conv-3x3", model(
        [node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])],
        [("x", F, [1, c, "H", "W"])], [("y", F, None)],
        {"w": (rng.standard_normal((4, c, 3, 3)) / 8).astype(np.float32), "b": uniform(4, -0.1, 0.1)}), images
    yield "GlobalAveragePool", model([node("GlobalAveragePool", ["x"], ["y"])], [("x", F, [1, c, "H", "W"])],
                                     [("y", F, None)]), images
    # FPN's extra level: a 1x1 max pool with stride 2.
    yield "MaxPool", model([node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1], strides=[2, 2], pads=[0, 0, 0, 0],
                                 ceil_mode=0, dilations=[1, 1])], [("x", F, [1, c, "H", "W"])],
                           [("y", F, None)]), images
    # MaxPool's Indices output (shapefn's converter): ties (small integers) go
    # to the first in window order, padding never wins, column-major planes.
    def ties(*shape):
        return rng.integers(-2, 3, shape).astype(np.float32)

    yield "MaxPool-indices-2d", model(
        [node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2],
              ceil_mode=1, storage_order=1)],
        [("x", F, ["N", 2, 5, 4])], [("y", F, None), ("i", I64, None)], opset=12), \
        [[ties(n, 2, 5, 4) - 3] for n in (2, 1)]
    yield "MaxPool-indices-1d", model(
        [node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER")],
        [("x", F, ["N", 3, 7])], [("y", F, None), ("i", I64, None)], opset=12), [[ties(n, 3, 7)] for n in (2, 0)]
    # MaxUnpool to the pooled input's shape (indices into it, as onnxruntime reads them), given as a constant.
    yield "MaxUnpool-output-shape", model(
        [node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
         node("MaxUnpool", ["p", "i", "s"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [("x", F, [1, 2, 5, 5])], [("y", F, None)], {"s": i64(1, 2, 5, 5)}, opset=12), \
        [[uniform((1, 2, 5, 5))] for _ in range(2)]
    yield "Gemm", model([node("Gemm", ["x", "w", "b"], ["y"], alpha=1.0, beta=1.0, transB=1)], [("x", F, ["N", 12])],
                        [("y", F, None)], {"w": uniform((10, 12), -0.3, 0.3), "b": uniform(10)}), \
        [[uniform((n, 12))] for n in (4, 1, 0)]
    yield "Softmax-axis1", model([node("Softmax", ["x"], ["y"], axis=1)], [("x", F, ["N", 91])], [("y", F, None)]), \
        [[uniform((n, 91), -5, 5)] for n in (3, 0)]
    yield "Softmax-axis2", model([node("Softmax", ["x"], ["y"], axis=2)], [("x", F, [1, "N", 91])],
                                 [("y", F, None)]), [[uniform((1, n, 91), -5, 5)] for n in (3, 1)]
    for axis in (1, 2, -1):
        yield f"Flatten-axis{axis}", model([node("Flatten", ["x"], ["y"], axis=axis)], [("x", F, ["N", 4, 7, 3])],
                                           [("y", F, None)]), [[uniform((n, 4, 7, 3))] for n in (2, 0)]


NETWORK = cases(network_cases)


@pytest.mark.parametrize("case", NETWORK)
def test_network(onnx_check, case):
    onnx_check(*NETWORK[case])


def layout_cases():
    yield "Transpose-5d", model([node("Transpose", ["x"], ["y"], perm=[0, 3, 4, 1, 2])],
                                [("x", F, [1, 6, 4, "H", "W"])], [("y", F, None)]), \
        [[uniform((1, 6, 4, h, w))] for h, w in ((3, 5), (2, 1))]
    yield "Transpose-2d", model([node("Transpose", ["x"], ["y"], perm=[1, 0])], [("x", I64, ["N", 2])],
                                [("y", I64, None)]), [[rng.integers(0, 9, (n, 2))] for n in (5, 0)]
    # Slice before opset 10: bounds as attributes (older PyTorch exports).
    yield "Slice-opset9", model([node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1], axes=[1, 2])],
                                [("x", F, ["N", 4, 5])], [("y", F, None)], opset=9), \
        [[uniform((n, 4, 5))] for n in (3, 0)]
    for axes in ([-1], [0], [1], [2], [3]):
        yield f"Unsqueeze{axes}", model([node("Unsqueeze", ["x"], ["y"], axes=axes)], [("x", F, ["N", 2, 3])],
                                        [("y", F, None)]), [[uniform((n, 2, 3))] for n in (4, 0)]
    for axis in (0, 1):
        shape = ["N", 1, 4] if axis else [1, "N", 4]
        yield f"Squeeze[{axis}]", model([node("Squeeze", ["x"], ["y"], axes=[axis])], [("x", F, shape)],
                                        [("y", F, None)]), \
            [[uniform([n if d == "N" else d for d in shape])] for n in (3, 0)]
    def concat_shape(size, axis):
        return [size if i == axis % 3 else 2 for i in range(3)]

    for axis in (0, 1, 2, -1):  # each input with its own size along the axis
        yield f"Concat-axis{axis}", model([node("Concat", ["a", "b", "c"], ["y"], axis=axis)],
                                          [(k, F, concat_shape(k.upper(), axis)) for k in "abc"], [("y", F, None)]), \
            [[uniform(concat_shape(n + j, axis)) for j in range(3)] for n in (1, 0)]
    yield "Split-4", model([node("Split", ["x"], ["a", "b", "c", "d"], axis=1, split=[1, 1, 1, 1])],
                           [("x", F, ["N", 4])], [(k, F, None) for k in "abcd"]), [[uniform((n, 4))] for n in (5, 0)]
    yield "Split-1", model([node("Split", ["x"], ["y"], axis=0, split=[1])], [("x", I64, [1, "N"])],
                           [("y", I64, None)]), [[rng.integers(0, 9, (1, n))] for n in (5, 0)]
    yield "Split-squeeze", model([node("Split", ["x"], ["a", "b"], axis=1, split=[1, 1]),
                                  node("Squeeze", ["a"], ["y"], axes=[1]), node("Squeeze", ["b"], ["z"], axes=[1])],
                                 [("x", I64, ["N", 2])], [("y", I64, None), ("z", I64, None)]), \
        [[rng.integers(0, 9, (n, 2))] for n in (5, 0)]
    yield "Gather-scalar-axis0", model([node("Gather", ["x", "i"], ["y"], axis=0)], [("x", F, [6, "N"])],
                                       [("y", F, None)], {"i": np.int64(2)}), [[uniform((6, n))] for n in (3, 0)]
    yield "Gather-scalar-axis1", model([node("Gather", ["x", "i"], ["y"], axis=1)], [("x", I64, ["N", 3])],
                                       [("y", I64, None)], {"i": np.int64(1)}), \
        [[rng.integers(0, 9, (n, 3))] for n in (4, 0)]
    # Gathering the scores TopK chose, and the boxes NMS kept.
    yield "Gather-runtime-indices", model([node("Gather", ["x", "i"], ["y"], axis=0)],
                                          [("x", F, ["N", 4]), ("i", I64, ["K"])], [("y", F, None)]), \
        [[uniform((6, 4)), np.array([5, 0, 2])], [uniform((3, 4)), np.zeros(0, np.int64)],
         [uniform((2, 4)), np.array([1, 1, 0, 1])]]
    yield "Gather-runtime-axis1", model([node("Gather", ["x", "i"], ["y"], axis=1)],
                                        [("x", F, [1, "N"]), ("i", I64, [1, "K"])], [("y", F, None)]), \
        [[uniform((1, 6)), np.array([[5, 0, 2]])], [uniform((1, 3)), np.zeros((1, 0), np.int64)]]
    # Shape values with constants (-1 and 0 kept as values), as a Reshape target and as data.
    yield "Shape-Constant-Identity", model(
        [node("Shape", ["x"], ["s"]), node("Constant", [], ["c"], value=numpy_helper.from_array(i64(-1, 0, 7))),
         node("Identity", ["c"], ["ci"]), node("Concat", ["s", "ci"], ["y"], axis=0),
         node("Add", ["y", "one"], ["z"])],
        [("x", F, ["N", "M"])], [("y", I64, None), ("z", I64, None)], {"one": np.int64(1)}), \
        [[uniform((n, m))] for n, m in ((3, 5), (0, 2))]


LAYOUT = cases(layout_cases)


@pytest.mark.parametrize("case", LAYOUT)
def test_layout(onnx_check, case):
    onnx_check(*LAYOUT[case])


def family_cases():
    """The other operators of torchvision's detection family (RetinaNet,
    FCOS, SSD300, Keypoint and Mask R-CNN), at opset 17 where they need it."""
    # FCOS: class of each flattened (location, class) score, and the top-k mask logic.
    yield "Mod-int64", model([node("Mod", ["x", "k"], ["y"], fmod=0)], [("x", I64, ["N"])], [("y", I64, None)],
                             {"k": np.int64(91)}), [[rng.integers(-300, 3000, n)] for n in (9, 0)]
    yield "Xor", model([node("Xor", ["a", "b"], ["y"])], [("a", B, ["N"]), ("b", B, ["N"])], [("y", B, None)]), \
        [[rng.random(n) < 0.5, rng.random(n) < 0.5] for n in (8, 0)]
    # FCOS's GroupNorm: reshaped to [N, groups, -1], normalized per group.
    yield "InstanceNormalization", model(
        [node("InstanceNormalization", ["x", "scale", "bias"], ["y"], epsilon=1e-5)], [("x", F, ["N", 4, "L"])],
        [("y", F, None)], {"scale": np.ones(4, np.float32), "bias": np.zeros(4, np.float32)}), \
        [[uniform((n, 4, length))] for n, length in ((2, 9), (1, 30))]
    # Keypoint R-CNN's keypoint logits (4x4, stride 2, padding 1); Mask R-CNN's is the 2x2 of the mask head test.
    yield "ConvTranspose-4x4-s2-p1", model(
        [node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])],
        [("x", F, ["N", 3, "H", "W"])], [("y", F, None)],
        {"w": uniform((3, 5, 4, 4), -0.5, 0.5), "b": uniform(5, -0.1, 0.1)}), \
        [[uniform((n, 3, h, w))] for n, h, w in ((2, 7, 7), (1, 4, 9), (0, 7, 7))]
    # Keypoint R-CNN: each keypoint's heatmap maximum.
    yield "ArgMax", model([node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], [("x", F, ["K", "P"])],
                          [("y", I64, None)]), [[uniform((k, p))] for k, p in ((17, 50), (3, 1))]
    # SSD300's L2Norm of conv4_3 over channels.
    yield "ReduceL2", model([node("ReduceL2", ["x"], ["y"], axes=[1], keepdims=1)], [("x", F, ["N", 6, "H", "W"])],
                            [("y", F, None)]), [[uniform((n, 6, h, w))] for n, h, w in ((1, 5, 4), (2, 1, 3))]
    yield "GreaterOrEqual", model([node("GreaterOrEqual", ["x", "t"], ["y"])], [("x", F, ["N"])], [("y", B, None)],
                                  {"t": np.float32(0.5)}, opset=17), [[uniform(n, 0, 1)] for n in (9, 0)]
    # Mask R-CNN's paste loop and Keypoint R-CNN's heatmap loop (tests/test_onnx_loop.py and
    # tests/test_loop_host_params.py test loops in depth): a counted loop with a carried sum.
    body = helper.make_graph(
        [node("Cast", ["i"], ["fi"], to=F), node("Add", ["acc", "fi"], ["acc_out"]), node("Identity", ["cond"], ["c"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, []),
                 helper.make_tensor_value_info("acc", F, ["N"])],
        [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("acc_out", F, ["N"])])
    yield "Loop-counted", model([node("Loop", ["n", "", "x"], ["y"], body=body)], [("x", F, ["N"]), ("n", I64, [])],
                                [("y", F, ["N"])], opset=17), \
        [[uniform(4), np.array(n, np.int64)] for n in (3, 0)]


FAMILY = cases(family_cases)


@pytest.mark.parametrize("case", FAMILY)
def test_detection_family_ops(onnx_check, case):
    onnx_check(*FAMILY[case])


GROUPS = (ELEMENTWISE, COMPARE, CAST_CLIP, REDUCES, NETWORK, LAYOUT, FAMILY)
