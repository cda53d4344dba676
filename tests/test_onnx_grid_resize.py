"""AffineGrid (``frontend/onnx/ops/grid.py``), Resize's tf_crop_and_resize and
antialias modes and Upsample (``frontend/onnx/ops/resize.py``) on a strict sim
and on opencl, each model with a batch size known only at run time, fed
two. Compared with onnxruntime (``onnx_check``) where it computes what
ONNX's reference computes, else with ONNX's reference (``reference_check``,
each case says why). ONNX's own node tests of these operators run in
``test_onnx_backend_suite.py``."""
import numpy as np
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator
from test_onnx_ops import i64, model, node, uniform

import shapefn
from conftest import DEVICES, need_opencl

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@pytest.fixture(scope="module", params=DEVICES)
def reference_check(request):
    """``check(model, feeds)``: ``model`` imported, compiled and run on the
    fixture's device (a strict sim for sim), each feed's outputs compared
    with ONNX's reference implementation."""
    device = request.param
    if device == "opencl":
        need_opencl()

    def check(onnx_model, feeds, atol=1e-5):
        exe = shapefn.compile(shapefn.from_onnx(onnx_model), device)
        vm = shapefn.VirtualMachine(exe, shapefn.sim(strict=True) if device == "sim" else device)
        reference = ReferenceEvaluator(onnx_model)
        names = [i.name for i in onnx_model.graph.input]
        for args in feeds:
            (want,) = reference.run(None, dict(zip(names, args)))
            got = vm(*args).numpy()
            assert (got.dtype, got.shape) == (want.dtype, want.shape), [a.shape for a in args]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)

    return check


def thetas(n, spatial):
    return uniform((n, spatial, spatial + 1), -1.5, 1.5)


def test_affine_grid_2d_to_a_runtime_size(onnx_check):
    """``size`` a runtime tensor (as in ONNX's node tests): the grid's sizes
    come from its values; a size of 1 gives the pixel's centre, 0."""
    m = model([node("AffineGrid", ["theta", "size"], ["grid"])], [("theta", F, ["N", 2, 3]), ("size", I64, [4])],
              [("grid", F, None)], opset=20)
    onnx_check(m, [[thetas(2, 2), i64(2, 3, 5, 6)], [thetas(1, 2), i64(1, 1, 1, 4)]])


def test_affine_grid_3d_aligned_to_literal_sizes(onnx_check):
    """``size`` = ``Concat(Shape(theta)[:1], [C, D, H, W])``: the spatial
    sizes are literals at import (no shape function), the batch theta's."""
    m = model([node("Shape", ["theta"], ["n"], end=1), node("Concat", ["n", "cdhw"], ["size"], axis=0),
               node("AffineGrid", ["theta", "size"], ["grid"], align_corners=1)],
              [("theta", F, ["N", 3, 4])], [("grid", F, None)], {"cdhw": i64(1, 2, 3, 4)}, opset=20)
    onnx_check(m, [[thetas(2, 3)], [thetas(1, 3)]])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # (the reference's step for a size of 1)
def test_affine_grid_aligned_to_a_tensors_shape(reference_check):
    """``size`` = ``Shape(x)`` (PyTorch's ``affine_grid(theta, x.size())``):
    the grid's sizes are x's. Against ONNX's reference: with align_corners,
    an axis of size 1 is at -1 there (and in PyTorch), 1 in onnxruntime."""
    m = model([node("Shape", ["x"], ["size"]), node("AffineGrid", ["theta", "size"], ["grid"], align_corners=1)],
              [("theta", F, ["N", 2, 3]), ("x", F, ["N", 3, "H", "W"])], [("grid", F, None)], opset=20)
    reference_check(m, [[thetas(2, 2), uniform((2, 3, 4, 5))], [thetas(3, 2), uniform((3, 3, 1, 3))]])


def crop_and_resize(mode, axes=None, sizes=None, **attrs):
    """tf_crop_and_resize of ``x[N, 2, H, W]`` to runtime sizes, or to
    ``sizes`` (a constant)."""
    k = 2 if axes else 4
    inputs = [("x", F, ["N", 2, "H", "W"]), ("roi", F, [2 * k])] + ([("sizes", I64, [k])] if sizes is None else [])
    attrs |= {"axes": axes} if axes else {}
    return model([node("Resize", ["x", "roi", "", "sizes"], ["y"], mode=mode,
                       coordinate_transformation_mode="tf_crop_and_resize", **attrs)],
                 inputs, [("y", F, None)], {} if sizes is None else {"sizes": sizes}, opset=19)


def test_tf_crop_and_resize_linear(reference_check):
    """A region partly outside the image (``extrapolation_value`` there),
    one inside, one reversed, and one output pixel (the region's centre).
    Against ONNX's reference: onnxruntime returns the input unchanged where
    the sizes are the input's, whatever the region."""
    m = crop_and_resize("linear", extrapolation_value=-5.0)
    reference_check(m, [
        [uniform((2, 2, 5, 6)), np.float32([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3]), i64(2, 2, 4, 7)],
        [uniform((1, 2, 4, 4)), np.float32([0, 0, 0.6, 0.8, 1, 1, 0.2, 0.1]), i64(1, 2, 4, 4)],
        [uniform((2, 2, 3, 5)), np.float32([0, 0, 0.3, 0.2, 1, 1, 0.7, 0.9]), i64(2, 2, 1, 1)]])


def test_tf_crop_and_resize_nearest_on_some_axes(reference_check):
    """``axes`` [3, 2]: the region and the (constant) sizes are given width
    first."""
    m = crop_and_resize("nearest", axes=[3, 2], sizes=i64(9, 4), nearest_mode="round_prefer_ceil")
    reference_check(m, [[uniform((2, 2, 5, 6)), np.float32([0.1, -0.3, 1.2, 0.8])],
                        [uniform((1, 2, 7, 3)), np.float32([0.0, 0.25, 1.0, 0.75])]])


def test_antialias_linear_to_runtime_scales(onnx_check):
    """Downscaling (the filter widened by 1 / scale: more taps, a number
    known at run time), and upscaling (plain linear)."""
    m = model([node("Resize", ["x", "", "scales"], ["y"], mode="linear", antialias=1)],
              [("x", F, ["N", 2, "H", "W"]), ("scales", F, [4])], [("y", F, None)], opset=19)
    onnx_check(m, [[uniform((2, 2, 9, 11)), np.float32([1, 1, 0.3, 0.6])],
                   [uniform((1, 2, 5, 4)), np.float32([1, 1, 1.5, 0.5])]], atol=1e-5)


def test_antialias_cubic_to_runtime_sizes(onnx_check):
    """Cubic with ``exclude_outside`` and ``asymmetric`` coordinates on the
    height and width (``axes``)."""
    m = model([node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic", antialias=1, exclude_outside=1,
                    coordinate_transformation_mode="asymmetric", axes=[2, 3])],
              [("x", F, ["N", 2, "H", "W"]), ("sizes", I64, [2])], [("y", F, None)], opset=19)
    onnx_check(m, [[uniform((2, 2, 10, 7)), i64(3, 5)], [uniform((1, 2, 6, 6)), i64(6, 2)]], atol=1e-5)


def test_upsample(onnx_check):
    """Upsample (opset 9) to runtime scales, nearest and linear:
    coordinates ``x / scale``, the nearest pixel rounded down."""
    m = model([node("Upsample", ["x", "scales"], ["nearest"]),
               node("Upsample", ["x", "scales"], ["linear"], mode="linear")],
              [("x", F, ["N", 3, "H", "W"]), ("scales", F, [4])], [("nearest", F, None), ("linear", F, None)],
              opset=9)
    onnx_check(m, [[uniform((2, 3, 3, 4)), np.float32([1, 1, 2, 1.5])],
                   [uniform((1, 3, 2, 2)), np.float32([1, 1, 3, 2])]])
