"""Patterns of torchvision's detection exports (tests/test_torchvision_models.py),
small, on sim and opencl against onnxruntime."""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from conftest import run_on_devices
from shapefn.frontend import from_onnx

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def test_loop_body_arithmetic_on_constants_is_folded_on_every_device():
    """Mask R-CNN's mask-pasting Loop computes sizes by ScatterElements on
    constants. Folded at compile time on sim, it was run on the host and
    copied to the device each iteration on opencl: an opencl build has the
    GPU form of the scatter, which TVM's constant folding (it compiles for
    the CPU) cannot build, and shapefn's did not look inside the Loop body."""
    consts = {"base": np.array([0, 0], np.int64), "at": np.array([1], np.int64), "value": np.array([3], np.int64)}
    body = helper.make_graph(
        [helper.make_node("ScatterElements", ["base", "at", "value"], ["step"], axis=0),
         helper.make_node("Cast", ["step"], ["step_f"], to=F),
         helper.make_node("Add", ["x_in", "step_f"], ["x_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("x_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("x_out", F, [2])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    calls = [[np.array(trips, np.int64), np.array([1.0, 2.0], np.float32)] for trips in (5, 0)]

    results = run_on_devices(from_onnx(model), calls)  # asserts the counters equal

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for (got, _), (trips, x) in zip(results["opencl"], calls):
        np.testing.assert_array_equal(got, session.run(None, {"M": trips, "x": x})[0])
    (_, five_trips), (_, no_trip) = results["opencl"]
    assert five_trips["h2d_copies"] == no_trip["h2d_copies"]  # nothing copied in the loop
