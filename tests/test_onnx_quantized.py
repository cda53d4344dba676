"""ONNX's QLinearMatMul, QLinearConv, ConvInteger and blocked
QuantizeLinear / DequantizeLinear (shapefn's converters,
``frontend/onnx/ops/quantized.py``) on a strict sim and on opencl
(``onnx_check``) against onnxruntime, exactly: int8 and uint8, per-tensor,
per-column / per-output-channel and blocked scales, scales given at run
time, products that round at exact halves, saturation at both ends, and
sizes known only at run time. float16 scales on sim only (PoCL's CPU
device has no half precision), against ONNX's reference. ONNX's own node
tests of these ops run in ``test_onnx_backend_suite.py``."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from test_onnx_ops import model, node

import shapefn
from shapefn.frontend import from_onnx
from shapefn.runtime.errors import UnsupportedOnnxOp

F, F16, I8, U8, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32
rng = np.random.default_rng(11)
QLINEAR_MATMUL = ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"]


# onnxruntime's uint8 x int8 products on x86-64 CPUs with AVX2 but neither
# AVX-512 nor VNNI sum pairs of products in int16 (VPMADDUBSW), saturating
# at 32,767: 255 * 127 * 2 gives 32,767 there, its answer then depends on the
# machine. int8 weights in [-64, 63] against uint8 data keep every pair's
# sum within int16, so onnxruntime is exact on every machine.
S8_UNDER_U8 = (-64, 63)


def ints(dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return rng.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1, shape).astype(dtype)


def test_qlinear_matmul_matches_onnxruntime(onnx_check):
    """int8 per tensor with a multiplier of 0.5 (every odd product is an
    exact half: ties go to even), and uint8 ``a`` of rank 3 times an int8
    ``b`` quantized per column, its scales and zero points given at run time."""
    half_names, column_names = ([f"{prefix}_{name}" for name in QLINEAR_MATMUL] for prefix in ("h", "c"))
    inits = {"h_a_scale": np.float32(0.5), "h_a_zero": np.int8(3), "h_b": ints(np.int8, (6, 4), -4, 4),
             "h_b_scale": np.float32(0.5), "h_b_zero": np.int8(-1), "h_y_scale": np.float32(0.5),
             "h_y_zero": np.int8(-5), "c_a_zero": np.uint8(121), "c_b": ints(np.int8, (8, 5), *S8_UNDER_U8),
             "c_y_zero": np.uint8(130)}
    m = model([node("QLinearMatMul", half_names, ["y"]), node("QLinearMatMul", column_names, ["z"])],
              [("h_a", I8, ["N", 6]), ("c_a", U8, ["M", 3, 8]), ("c_a_scale", F, []), ("c_b_scale", F, [5]),
               ("c_b_zero", I8, [5]), ("c_y_scale", F, [])],
              [("y", I8, None), ("z", U8, None)], inits, opset=13)

    def feed(n, lo, hi, m):
        return [ints(np.int8, (n, 6), lo, hi), ints(np.uint8, (m, 3, 8)), np.array(0.02, np.float32),
                rng.uniform(0.002, 0.02, 5).astype(np.float32), ints(np.int8, (5,), -4, 4), np.array(0.3, np.float32)]

    # (small values for the halves; full-range ones saturate at both ends)
    onnx_check(m, [feed(5, -4, 4, 2), feed(2, None, None, 1)])


def test_qlinear_conv_and_conv_integer_match_onnxruntime(onnx_check):
    """A padded, strided, dilated, grouped 2-D QLinearConv of uint8 data with
    int8 weights quantized per output channel (scales and zero points) and
    an int32 bias, and the ConvInteger of the same data and weights, over
    batch and height known at run time."""
    w = ints(np.int8, (4, 2, 3, 3), *S8_UNDER_U8)
    inits = {"x_scale": np.float32(0.05), "x_zero": np.uint8(100), "w": w,
             "w_scale": rng.uniform(0.005, 0.03, 4).astype(np.float32), "w_zero": np.array([0, 3, -2, 5], np.int8),
             "y_scale": np.float32(0.7), "y_zero": np.uint8(90), "bias": ints(np.int32, (4,), -3000, 3000),
             "w_zero_scalar": np.int8(3)}
    attrs = {"pads": [1, 0, 1, 2], "strides": [2, 1], "dilations": [1, 2], "group": 2}
    m = model([node("QLinearConv", ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero", "bias"],
                    ["y"], **attrs),
               node("ConvInteger", ["x", "w", "x_zero", "w_zero_scalar"], ["z"], **attrs)],
              [("x", U8, ["N", 4, "H", 6])], [("y", U8, None), ("z", I32, None)], inits, opset=13)
    onnx_check(m, [[ints(np.uint8, (2, 4, 7, 6))], [ints(np.uint8, (1, 4, 4, 6))]])


def test_1d_qlinear_conv_matches_onnxruntime(onnx_check):
    """int8 data and weights per tensor, SAME_LOWER padding with a stride over
    a length known only at run time (the padding computed then), a
    multiplier of 0.5 (exact halves)."""
    inits = {"x_scale": np.float32(0.25), "x_zero": np.int8(-2), "w": ints(np.int8, (4, 4, 3), -3, 3),
             "w_scale": np.float32(0.5), "w_zero": np.int8(1), "y_scale": np.float32(0.25), "y_zero": np.int8(7)}
    m = model([node("QLinearConv", ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"], ["y"],
                    auto_pad="SAME_LOWER", strides=[3])],
              [("x", I8, ["N", 4, "L"])], [("y", I8, None)], inits, opset=13)
    onnx_check(m, [[ints(np.int8, (2, 4, 10), -6, 6)], [ints(np.int8, (1, 4, 4))]])


def test_qlinear_matmul_of_float16_scales_matches_onnx_reference():
    """float16 scales (on sim): the multiplier rounded to half after each
    operation, as ONNX's reference computes it; here the multiplier
    computed in float32 and rounded once gives other results. (An even
    output zero point: the reference adds it before rounding.)"""
    scales = {"a_scale": np.float16(0.0433349609375), "b_scale": np.float16(0.04852294921875),
              "y_scale": np.float16(0.016693115234375)}
    inits = {**scales, "a_zero": np.uint8(128), "b": ints(np.uint8, (5, 3), 100, 140), "b_zero": np.uint8(120),
             "y_zero": np.uint8(128)}
    m = model([node("QLinearMatMul", QLINEAR_MATMUL, ["y"])], [("a", U8, ["N", 5])], [("y", U8, None)], inits,
              opset=21)
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), "sim"), shapefn.sim(strict=True))
    reference = ReferenceEvaluator(m)
    a_scale, b_scale, y_scale = (np.float32(s) for s in scales.values())
    single_rounding, other_results = np.float64(a_scale * b_scale / y_scale), False
    for n in (40, 1):
        a = ints(np.uint8, (n, 5), 113, 143)
        got = vm(a).numpy()
        want = reference.run(None, {"a": a})[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        accumulator = (a.astype(np.int32) - 128) @ (inits["b"].astype(np.int32) - 120)
        other_results |= np.any(np.clip(np.rint(accumulator * single_rounding) + 128, 0, 255) != want)
    assert other_results


def test_qlinear_matmul_per_row_follows_onnx():
    """``a`` quantized per row (on sim; onnxruntime refuses it, ONNX's
    reference broadcasts a vector per row along the columns): an ``[M]``
    vector and the ``[M, 1]`` form, given at run time, against ONNX's
    formula in numpy."""
    inits = {"b": ints(np.int8, (5, 3)), "b_scale": np.float32(0.04), "b_zero": np.int8(2),
             "y_scale": np.float32(0.9), "y_zero": np.int8(-3)}
    m = model([node("QLinearMatMul", QLINEAR_MATMUL, ["y"]),
               node("QLinearMatMul", ["a", "a_scale_2d", "a_zero_2d", *QLINEAR_MATMUL[3:]], ["z"])],
              [("a", I8, ["N", 5]), ("a_scale", F, ["N"]), ("a_zero", I8, ["N"]), ("a_scale_2d", F, ["N", 1]),
               ("a_zero_2d", I8, ["N", 1])], [("y", I8, None), ("z", I8, None)], inits, opset=13)
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), "sim"), shapefn.sim(strict=True))
    for n in (4, 1):
        a, a_scale, a_zero = ints(np.int8, (n, 5)), rng.uniform(0.01, 0.05, n).astype(np.float32), ints(np.int8, (n,))
        accumulator = (a.astype(np.int32) - a_zero[:, None]) @ (inits["b"].astype(np.int32) - 2)
        multiplier = (a_scale * inits["b_scale"] / inits["y_scale"]).astype(np.float64)[:, None]
        want = np.clip(np.rint(accumulator * multiplier) - 3, -128, 127).astype(np.int8)
        for got in vm(a, a_scale, a_zero, a_scale[:, None], a_zero[:, None]):
            np.testing.assert_array_equal(got.numpy(), want)


def test_blocked_quantize_and_dequantize_match_onnxruntime(onnx_check):
    """Blocked QuantizeLinear and DequantizeLinear (opset 21; shapefn's
    converters): int8 in blocks of 2 along a last axis of 5 (a short last
    block), scales and zero points given at run time with the batch; uint8
    in blocks of 3 along the batch, known only at run time, and the same
    without a zero point (``output_dtype``). Scales powers of two and data
    multiples of 1/8: exact halves (ties to even) and saturation."""
    def blocked(op, ins, out, axis, block, **attrs):
        return node(op, ins, [out], axis=axis, block_size=block, **attrs)

    m = model([blocked("QuantizeLinear", ["x", "s", "z"], "q", 1, 2),
               blocked("DequantizeLinear", ["q", "s", "z"], "y", 1, 2),
               blocked("QuantizeLinear", ["x", "t", "u"], "p", 0, 3),
               blocked("DequantizeLinear", ["p", "t", "u"], "w", -2, 3),
               blocked("QuantizeLinear", ["x", "t"], "r", 0, 3, output_dtype=U8)],
              [("x", F, ["N", 5]), ("s", F, ["N", 3]), ("z", I8, ["N", 3]), ("t", F, ["S", 5]), ("u", U8, ["S", 5])],
              [("q", I8, None), ("y", F, None), ("p", U8, None), ("w", F, None), ("r", U8, None)], opset=21)

    def feed(n):
        blocks = -(-n // 3)
        return [rng.integers(-640, 641, (n, 5)).astype(np.float32) / 8,
                (2.0 ** rng.integers(-2, 2, (n, 3))).astype(np.float32), ints(np.int8, (n, 3)),
                (2.0 ** rng.integers(-2, 2, (blocks, 5))).astype(np.float32), ints(np.uint8, (blocks, 5))]

    onnx_check(m, [feed(5), feed(2)])


@pytest.mark.parametrize("op, shapes, message", [
    ("QLinearMatMul", {"y_scale": [2], "y_zero": [2]}, "y_scale"),
    ("QLinearMatMul", {"a_scale": [1, 1, 3], "a_zero": [1, 1, 3]}, "a_zero_point of rank 3"),
    ("QLinearConv", {"a_scale": [3], "a_zero": [3]}, "x_zero_point"),
])
def test_unsupported_quantization_is_refused(op, shapes, message):
    """Quantization ONNX does not define for a parameter is refused while
    importing, naming the op and the parameter (QLinearConv's inputs in
    QLinearMatMul's names: x is a, w is b)."""
    data = {"a": [3, 4], "b": [4, 2]} if op == "QLinearMatMul" else {"a": [1, 3, 5, 5], "b": [2, 3, 1, 1]}
    inputs = [(name, F if name.endswith("scale") else U8, data.get(name, shapes.get(name, [])))
              for name in QLINEAR_MATMUL]
    m = model([node(op, QLINEAR_MATMUL, ["out"])], inputs, [("out", U8, None)], opset=13)
    with pytest.raises(UnsupportedOnnxOp, match=f"{op}.*{message}"):
        from_onnx(m)
