"""ONNX's NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (shapefn's
converters, ``frontend/onnx/ops/losses.py``) on a strict sim and on opencl
(``onnx_check``) against onnxruntime: every reduction, class weights,
``ignore_index`` (in range and negative) and inputs of rank 2 and 4. ONNX's
own node tests of both run in ``test_onnx_backend_suite.py``."""
import numpy as np
import pytest
from onnx import TensorProto
from test_onnx_ops import model, node, uniform

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(3)


def loss_model(op, reduction, weighted, ignore_index, rank, log_prob=False):
    attrs = {"reduction": reduction} | ({"ignore_index": ignore_index} if ignore_index is not None else {})
    spatial = [f"D{i}" for i in range(rank - 2)]
    inputs = [("x", F, ["N", 5, *spatial]), ("t", I64, ["N", *spatial])]
    outputs = [("loss", F, None)] + ([("log_prob", F, None)] if log_prob else [])
    inits = {"w": rng.uniform(0.1, 2.0, 5).astype(np.float32)} if weighted else {}
    names = ["x", "t"] + (["w"] if weighted else [])
    return model([node(op, names, [name for name, _, _ in outputs], **attrs)], inputs, outputs, inits, opset=13)


def targets(shape, ignore_index):
    t = rng.integers(0, 5, shape)
    if ignore_index is not None:
        t[rng.random(shape) < 0.3] = ignore_index
    return t.astype(np.int64)


@pytest.mark.parametrize("rank", [2, 4])
@pytest.mark.parametrize("ignore_index", [None, 2, -1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_losses_match_onnxruntime(onnx_check, op, reduction, weighted, ignore_index, rank):
    log_prob = op == "SoftmaxCrossEntropyLoss"
    shapes = [(3,), (1,)] if rank == 2 else [(2, 3, 3), (1, 4, 2)]
    onnx_check(loss_model(op, reduction, weighted, ignore_index, rank, log_prob),
               [[uniform((s[0], 5, *s[1:])), targets(s, ignore_index)] for s in shapes], atol=1e-5)
