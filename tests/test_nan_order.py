"""Ordering ops treat NaN the same way on every device (docs/guarantees.md):
TopK takes NaN as the largest value, as onnxruntime and numpy's sort do;
ArgMax/ArgMin give the first NaN and ReduceMax/ReduceMin give NaN where a
NaN is there, as numpy and ONNX's reference do (onnxruntime's answer
depends on where the NaN lies); NonMaxSuppression never selects a box
scored NaN, as onnxruntime does with a score threshold."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import shapefn
from conftest import DEVICES

F, I64 = TensorProto.FLOAT, TensorProto.INT64
vi = helper.make_tensor_value_info
NAN, INF = np.float32(np.nan), np.float32(np.inf)
ROWS = [[NAN, 1, 2, 3, 4], [1, NAN, -INF, INF, 4], [3, 3, NAN, NAN, -INF], [NAN, NAN, NAN, NAN, NAN],
        [2, 1, INF, -INF, 0]]


def _model():
    nodes = [helper.make_node("TopK", ["x", "k"], ["top", "top_at"], axis=1, largest=1, name="top"),
             helper.make_node("TopK", ["x", "k"], ["bottom", "bottom_at"], axis=1, largest=0, name="bottom"),
             helper.make_node("ArgMax", ["x"], ["argmax"], axis=1, keepdims=0, name="argmax"),
             helper.make_node("ArgMin", ["x"], ["argmin"], axis=1, keepdims=0, name="argmin"),
             helper.make_node("ReduceMax", ["x", "last"], ["max"], keepdims=0, name="max"),
             helper.make_node("ReduceMin", ["x", "last"], ["min"], keepdims=0, name="min")]
    outputs = [vi("top", F, None), vi("top_at", I64, None), vi("bottom", F, None), vi("bottom_at", I64, None),
               vi("argmax", I64, None), vi("argmin", I64, None), vi("max", F, None), vi("min", F, None)]
    graph = helper.make_graph(nodes, "order", [vi("x", F, ["r", 5]), vi("k", I64, [1])], outputs,
                              initializer=[helper.make_tensor("last", I64, [1], [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _nms_model(threshold: bool):
    inputs = ["boxes", "scores", "most", "iou"] + (["floor"] if threshold else [])
    inits = [helper.make_tensor("most", I64, [1], [10]), helper.make_tensor("iou", F, [1], [0.5])]
    if threshold:
        inits.append(helper.make_tensor("floor", F, [1], [0.1]))
    graph = helper.make_graph([helper.make_node("NonMaxSuppression", inputs, ["selected"], name="nms")], "nms",
                              [vi("boxes", F, [1, "n", 4]), vi("scores", F, [1, 1, "n"])],
                              [vi("selected", I64, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@functools.cache
def _vm(model_name: str, device: str):
    model = _model() if model_name == "order" else _nms_model(model_name == "nms with threshold")
    return shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(model), device),
                                  shapefn.sim(strict=True) if device == "sim" else device)


DEVICES_AND_HOST = ["host", *DEVICES]


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_topk_takes_nan_as_the_largest_value_as_onnxruntime(device, k):
    x = np.array(ROWS, np.float32)
    session = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(["top", "top_at", "bottom", "bottom_at"], {"x": x, "k": np.array([k])})
    got = [o.numpy() for o in _vm("order", device)(x, np.array([k]))[:4]]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
def test_arg_and_reduced_extremes_give_nan_where_one_is_there_as_numpy(device):
    x = np.array(ROWS, np.float32)
    _, _, _, _, argmax, argmin, largest, smallest = (o.numpy() for o in _vm("order", device)(x, np.array([1])))
    np.testing.assert_array_equal(argmax, np.argmax(x, axis=1))
    np.testing.assert_array_equal(argmin, np.argmin(x, axis=1))
    np.testing.assert_array_equal(largest, np.max(x, axis=1))  # (assert_array_equal: NaN equals NaN)
    np.testing.assert_array_equal(smallest, np.min(x, axis=1))


BOXES = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.05], [2, 2, 3, 3], [5, 5, 6, 6]]], np.float32)
SCORES = [[0.9, NAN, 0.8, 0.3], [NAN, 0.9, 0.8, 0.3], [0.3, 0.9, NAN, 0.8], [NAN, NAN, NAN, NAN]]


@pytest.mark.parametrize("device", DEVICES_AND_HOST)
@pytest.mark.parametrize("scores", SCORES, ids=str)
def test_nms_never_selects_a_box_scored_nan(device, scores):
    scores = np.array([[scores]], np.float32)
    with_floor = ort.InferenceSession(_nms_model(True).SerializeToString(), providers=["CPUExecutionProvider"])
    want = with_floor.run(None, {"boxes": BOXES, "scores": scores})[0]
    for model in ("nms with threshold", "nms"):
        got = _vm(model, device)(BOXES, scores).numpy()
        np.testing.assert_array_equal(got, want)
        assert not np.isnan(scores[0, 0, got[:, 2]]).any()
