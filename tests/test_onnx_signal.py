"""ONNX's DFT (shapefn's converter, ``frontend/onnx/ops/signal.py``) on a strict
sim and on opencl (``onnx_check``) against onnxruntime: forward and
inverse, real and complex input, one-sided transforms both ways, a
``dft_length`` that pads or cuts, and an axis given at run time (opset
20), validated where it crosses to the host."""
import numpy as np
import pytest
from onnx import TensorProto
from test_onnx_ops import model, node, uniform

import shapefn
from shapefn.frontend import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def dft_model(shape, length=None, opset=17, **attrs):
    inits = {"n": np.array(length, np.int64)} if length is not None else {}
    return model([node("DFT", ["x", "n" if length is not None else ""], ["y"], **attrs)], [("x", F, shape)],
                 [("y", F, None)], inits, opset=opset)


@pytest.mark.parametrize("shape, length, attrs", [
    (["N", 6, 5, 2], None, {"axis": 1}),                          # complex, forward
    (["N", 6, 5, 2], 4, {"axis": 2, "inverse": 1}),                # complex, inverse, cut to 4
    (["N", 7, 1], 9, {"axis": 1, "onesided": 1}),                  # real, one-sided, padded to 9
    (["N", 4, 3, 2], 6, {"axis": 1, "inverse": 1, "onesided": 1}),  # one-sided inverse: real
])
def test_dft_matches_onnxruntime(onnx_check, shape, length, attrs):
    onnx_check(dft_model(shape, length, **attrs),
               [[uniform((n, *shape[1:]))] for n in (2, 1)], atol=1e-4)


def runtime_axis_model():
    return model([node("DFT", ["x", "", "axis"], ["y"], inverse=1)], [("x", F, [2, 5, 3, 1]), ("axis", I64, [])],
                 [("y", F, None)], opset=20)


def test_dft_along_an_axis_given_at_run_time_matches_onnxruntime(onnx_check):
    onnx_check(runtime_axis_model(), [[uniform((2, 5, 3, 1)), np.array(a, np.int64)] for a in (1, -2, 0)],
               atol=1e-5)


def test_an_axis_out_of_range_at_run_time_is_an_error():
    """Past the signal's axes, or the last axis (the parts'), as -1 or 3."""
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(runtime_axis_model()), "sim"), "sim")
    for axis in (3, -1, -5):
        with pytest.raises(ValueError, match="axis"):
            vm(uniform((2, 5, 3, 1)), np.array(axis, np.int64))


def test_stft_with_a_window_and_a_step_given_at_run_time_matches_onnxruntime(onnx_check):
    """Frames of the window's length; the frame count follows the signal's
    length and the step, both known only at run time."""
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(8) / 8)).astype(np.float32)
    m = model([node("STFT", ["x", "step", "w"], ["y"])], [("x", F, ["N", "L", 1]), ("step", I64, [])],
              [("y", F, None)], {"w": window}, opset=17)
    onnx_check(m, [[uniform((2, 40, 1)), np.array(4, np.int64)], [uniform((1, 11, 1)), np.array(3, np.int64)]],
               atol=1e-5)


def test_the_inverse_transform_of_onnx_node_test_is_exact_where_its_reference_is_not():
    """ONNX's test_dft_inverse expects 1.9e-07 where the exact result is 0
    (its reference is a single-precision FFT; the suite's atol is 1e-07):
    shapefn's output is checked against the transform in double precision."""
    from onnx.backend.test.loader import load_model_tests

    (case,) = [c for c in load_model_tests(kind="node") if c.name == "test_dft_inverse"]
    (inputs, _), = case.data_sets
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(case.model), "sim"), "sim")
    got = vm(*inputs).numpy()
    x, axis = inputs[0].astype(np.float64), int(inputs[1])
    exact = np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=axis)
    np.testing.assert_allclose(got[..., 0], exact.real, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got[..., 1], exact.imag, rtol=0, atol=1e-5)
    assert np.abs(got[..., 1][np.abs(exact.imag) < 1e-12]).max() < 1e-7  # (where the reference is off)
