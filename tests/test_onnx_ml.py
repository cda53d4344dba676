"""ONNX's ``ai.onnx.ml`` operators shapefn converts (``frontend/onnx/ops/ml.py``)
on a strict sim and on opencl (``onnx_check``) against onnxruntime, beside
the default domain's; and the domain's other operators refused by name."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from test_onnx_ops import model, uniform

import shapefn
from shapefn.frontend import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def ml_model(nodes, inputs, outputs):
    m = model(nodes, inputs, outputs, opset=17)
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return m


def ml_node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="ai.onnx.ml", **attrs)


def test_binarizer_and_feature_extraction_match_onnxruntime(onnx_check):
    """A Binarizer over the features ArrayFeatureExtractor picks (indices
    given at run time, repeated), then a default-domain Add."""
    m = ml_model([ml_node("ArrayFeatureExtractor", ["x", "i"], ["f"]),
                  ml_node("Binarizer", ["f"], ["b"], threshold=0.5), helper.make_node("Add", ["b", "f"], ["y"])],
                 [("x", F, ["N", 6]), ("i", I64, ["K"])], [("y", F, None)])
    onnx_check(m, [[uniform((3, 6)), np.array([4, 0, 4], np.int64)], [uniform((1, 6)), np.array([5], np.int64)]])


def test_a_vector_gives_a_one_row_matrix(onnx_check):
    m = ml_model([ml_node("ArrayFeatureExtractor", ["x", "i"], ["y"])], [("x", F, ["N"]), ("i", I64, [1, 2])],
                 [("y", F, None)])
    onnx_check(m, [[uniform(7), np.array([[6, 2]], np.int64)], [uniform(3), np.array([[0, 0]], np.int64)]])


def test_other_ml_operators_are_refused_by_name():
    m = ml_model([ml_node("Scaler", ["x"], ["y"], scale=[2.0])], [("x", F, ["N", 1])], [("y", F, None)])
    with pytest.raises(shapefn.UnsupportedOnnxOp, match=r"ai\.onnx\.ml\.Scaler"):
        from_onnx(m)
