"""shapefn's CPU RoIAlign (kernels/cpu_roi_align.py) against onnxruntime:
sampling ratios, both pooling and both coordinate modes, several images, RoIs reaching out
of the map or lying wholly outside it, rectangular bins; and the cases it
leaves to TVM's kernel (an adaptive sampling ratio) still right."""
import numpy as np
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto
from test_onnx_ops import model, node

import shapefn
from shapefn.compiler.kernels import cpu_roi_align
from shapefn.compiler.passes import relax_passes
from shapefn.compiler.schedules import target_schedule

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(3)


def roi_align_model(opset=16, **attrs):
    return model([node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)],
                 [("x", F, ["N", 4, "H", "W"]), ("rois", F, ["R", 4]), ("batch", I64, ["R"])],
                 [("y", F, None)], opset=opset)


def rois(count, low, high):
    corners = np.sort(rng.uniform(low, high, (count, 2, 2)), 1)  # (x1 <= x2, y1 <= y2)
    return corners.transpose(0, 2, 1).reshape(count, 4)[:, [0, 2, 1, 3]].astype(np.float32)


def inputs(images, height, width, count, low=-20.0, high=120.0):
    x = rng.standard_normal((images, 4, height, width)).astype(np.float32)
    return [x, rois(count, low, high), rng.integers(0, images, count).astype(np.int64)]


def uses_shapefn_kernel(proto) -> bool:
    target = target_schedule.host_target()
    lowered = relax_passes.lower(shapefn.from_onnx(proto), target)
    return any(isinstance(f, tvm.tirx.PrimFunc) and cpu_roi_align.is_roi_align(f) for f in lowered.functions.values())


CASES = {
    "ratio2-7x7-half_pixel": dict(output_height=7, output_width=7, sampling_ratio=2, spatial_scale=0.25),
    "ratio1-14x14-output_half_pixel": dict(output_height=14, output_width=14, sampling_ratio=1, spatial_scale=0.125,
                                           coordinate_transformation_mode="output_half_pixel"),
    "ratio3-3x5": dict(output_height=3, output_width=5, sampling_ratio=3, spatial_scale=0.5),
    "max-ratio2": dict(output_height=4, output_width=4, sampling_ratio=2, spatial_scale=0.5, mode="max"),
}


@pytest.mark.parametrize("attrs", CASES.values(), ids=CASES.keys())
def test_matches_onnxruntime(attrs):
    proto = roi_align_model(**attrs)
    assert uses_shapefn_kernel(proto)
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(proto), "host"), "host")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for args in (inputs(2, 24, 32, 9), inputs(1, 5, 7, 3), inputs(1, 16, 16, 0),
                 inputs(1, 8, 8, 4, low=200.0, high=300.0)):  # (wholly outside the map)
        want = session.run(None, dict(zip(["x", "rois", "batch"], args)))[0]
        got = vm(*args).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_adaptive_sampling_ratio_stays_with_tvm_and_matches_onnxruntime():
    proto = roi_align_model(opset=10, output_height=4, output_width=4, spatial_scale=0.5, sampling_ratio=0)
    assert not uses_shapefn_kernel(proto)
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(proto), "host"), "host")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    args = inputs(1, 12, 10, 5, low=0.0, high=20.0)
    want = session.run(None, dict(zip(["x", "rois", "batch"], args)))[0]
    np.testing.assert_allclose(vm(*args).numpy(), want, rtol=1e-5, atol=1e-5)
