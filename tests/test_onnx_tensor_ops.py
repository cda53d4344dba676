"""ONNX's ReverseSequence, TensorScatter, Col2Im and Det (shapefn's
converters, ``frontend/onnx/ops/tensor_ops.py``) on a strict sim and on opencl
(``onnx_check``) against onnxruntime, with batch sizes known only at run
time: ReverseSequence along either axis, TensorScatter linear, circular
and without write indices, Col2Im with constant shapes (pads, strides,
dilations) and with shapes given at run time, Det of 1x1 to 4x4 matrices
(singular ones included). Values onnxruntime refuses (lengths and write
indices out of range, a Col2Im input that does not fit its shapes) against
ONNX's reference on sim. ONNX's own node tests of all four run in
``test_onnx_backend_suite.py``."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from test_onnx_ops import i64, model, node, uniform

import shapefn
from conftest import DEVICES
from shapefn.frontend import from_onnx
from shapefn.runtime.errors import UnsupportedOnnxOp

# onnx_check runs these on every device: each converter is a TE kernel of shapefn's own.
ONNX_CHECK_DEVICES = DEVICES

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(7)


def test_reverse_sequence(onnx_check):
    """Time-major (batch axis 1) floats and batch-major int64, lengths 0 to the whole axis."""
    m = model([node("ReverseSequence", ["x", "lx"], ["y"], batch_axis=1, time_axis=0),
               node("ReverseSequence", ["z", "lz"], ["w"], batch_axis=0, time_axis=1)],
              [("x", F, [5, "N", 3]), ("lx", I64, ["N"]), ("z", I64, ["M", "T"]), ("lz", I64, ["M"])],
              [("y", F, None), ("w", I64, None)], opset=13)
    onnx_check(m, [[uniform((5, 4, 3)), i64(0, 5, 2, 1), rng.integers(-9, 9, (3, 6)), i64(6, 1, 4)],
                   [uniform((5, 1, 3)), i64(3), rng.integers(-9, 9, (2, 1)), i64(1, 0)]])


def test_tensor_scatter(onnx_check):
    """A 4-D cache [B, heads, max length, head size] updated linearly and
    circularly (wrapping around), and a 3-D one along axis 1 from 0."""
    m = model([node("TensorScatter", ["past", "update", "lin"], ["linear"]),
               node("TensorScatter", ["past", "update", "circ"], ["circular"], mode="circular"),
               node("TensorScatter", ["past3", "update3"], ["plain"], axis=1)],
              [("past", F, ["B", 2, 6, 3]), ("update", F, ["B", 2, "S", 3]), ("lin", I64, ["B"]),
               ("circ", I64, ["B"]), ("past3", F, ["B", 5, 2]), ("update3", F, ["B", "S", 2])],
              [("linear", F, None), ("circular", F, None), ("plain", F, None)], opset=24)
    onnx_check(m, [[uniform((2, 2, 6, 3)), uniform((2, 2, 3, 3)), i64(3, 0), i64(5, 9), uniform((2, 5, 2)),
                    uniform((2, 3, 2))],
                   [uniform((3, 2, 6, 3)), uniform((3, 2, 1, 3)), i64(5, 2, 0), i64(0, 6, 11), uniform((3, 5, 2)),
                    uniform((3, 1, 2))]])


def test_col2im_with_constant_shapes(onnx_check):
    """A 2-D image (pads, strides, dilations) and a 3-D one, batch symbolic."""
    m = model([node("Col2Im", ["x", "image", "block"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2]),
               node("Col2Im", ["v", "image3", "block3"], ["w"])],
              [("x", F, ["N", 12, 15]), ("v", F, ["N", 8, 30])], [("y", F, None), ("w", F, None)],
              {"image": i64(5, 6), "block": i64(3, 2), "image3": i64(3, 4, 5), "block3": i64(2, 2, 1)}, opset=18)
    # (blocks: (5 + 3 - 2 - 1) // 2 + 1 = 3 by (6 + 1 - 2 - 1) + 1 = 5; 2 * 3 * 5 = 30 for the 3-D one)
    onnx_check(m, [[uniform((n, 12, 15)), uniform((n, 8, 30))] for n in (2, 1)], atol=1e-5)


def test_col2im_with_shapes_given_at_run_time(onnx_check):
    """image_shape and block_shape as graph inputs (as ONNX's node tests give them), other sizes each run."""
    m = model([node("Col2Im", ["x", "image", "block"], ["y"], strides=[1, 2])],
              [("x", F, ["N", "K", "L"]), ("image", I64, [2]), ("block", I64, [2])], [("y", F, None)], opset=18)
    onnx_check(m, [[uniform((2, 12, 4)), i64(4, 5), i64(3, 2)],  # (2 channels, 2 by 2 blocks; then 2, 3 by 3)
                   [uniform((1, 8, 9)), i64(4, 6), i64(2, 2)]], atol=1e-5)


def test_det(onnx_check):
    """Batches of 3x3 (one singular, one needing a row swap), 4x4, 2x2 and 1x1 matrices."""
    names = ["a", "b", "c", "d"]
    m = model([node("Det", [n], [f"det_{n}"]) for n in names],
              [("a", F, ["N", 3, 3]), ("b", F, ["N", 2, 4, 4]), ("c", F, [2, 2]), ("d", F, ["N", 1, 1])],
              [(f"det_{n}", F, None) for n in names], opset=11)

    def feed(n):
        a = uniform((n, 3, 3))
        a[0, 2] = a[0, 0] + a[0, 1]  # (singular)
        if n > 1:
            a[1, 0, 0] = 0.0  # (the first pivot is another row)
        return [a, uniform((n, 2, 4, 4)), uniform((2, 2)), uniform((n, 1, 1))]

    onnx_check(m, [feed(3), feed(1)], atol=1e-4)


def test_values_out_of_range_are_refused_naming_the_node():
    """A sequence length outside [0, steps] and a linear write past the cache
    raise IndexError (as onnxruntime refuses them; ONNX's reference reverses
    all of a longer sequence); a Col2Im input whose sizes do not fit its
    shapes given at run time is refused by the reshape's shape function."""
    m = model([node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1),
               node("TensorScatter", ["past", "update", "writes"], ["cache"]),
               node("Col2Im", ["cols", "image", "block"], ["image_out"])],
              [("x", F, ["N", 4]), ("lens", I64, ["N"]), ("past", F, ["N", 5, 2]), ("update", F, ["N", 3, 2]),
               ("writes", I64, ["N"]), ("cols", F, [1, 4, "L"]), ("image", I64, [2]), ("block", I64, [2])],
              [("y", F, None), ("cache", F, None), ("image_out", F, None)], opset=24)
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), "sim"), shapefn.sim(strict=True))
    x, past, update, cols = uniform((3, 4)), uniform((3, 5, 2)), uniform((3, 3, 2)), uniform((1, 4, 9))
    feeds = {"x": x, "lens": i64(4, 0, 3), "past": past, "update": update, "writes": i64(2, 0, 1), "cols": cols,
             "image": i64(4, 4), "block": i64(2, 2)}
    reference = ReferenceEvaluator(m).run(None, feeds)
    for got, want in zip(vm(*feeds.values()), reference, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    for name, values, message in [("lens", i64(9, 0, 3), r"sequence length is 9, outside \[0, 5\)"),
                                  ("lens", i64(4, -2, 3), r"sequence length is -2, outside \[0, 5\)"),
                                  ("writes", i64(3, 0, 1), r"write index is 3, outside \[0, 3\)")]:
        with pytest.raises(IndexError, match=message):
            for out in vm(*{**feeds, name: values}.values()):
                out.numpy()
    with pytest.raises(Exception, match="cannot reshape"):
        vm(*{**feeds, "cols": uniform((1, 4, 8))}.values())


@pytest.mark.parametrize("op, inputs, attrs, match", [
    ("Det", [("x", F, ["N", "M", "M"])], {}, "known at import"),
    ("Det", [("x", F, [40, 40])], {}, "up to 32"),
    ("Col2Im", [("x", F, [1, 4, 9]), ("image", I64, ["S"]), ("block", I64, ["S"])], {}, "static length"),
])
def test_refused(op, inputs, attrs, match):
    m = model([node(op, [name for name, _, _ in inputs], ["y"], **attrs)], inputs, [("y", F, None)], opset=18)
    with pytest.raises(UnsupportedOnnxOp, match=match):
        from_onnx(m)
