"""The optimizers of ONNX's ``ai.onnx.preview.training`` domain (shapefn's
converters, ``frontend/onnx/ops/training.py``) on sim and opencl against ONNX's
reference implementation (onnxruntime has none): several tensors updated
by one node, the first step (T = 0) and a later one, every attribute. And
Dropout in training mode, whose mask shapefn draws from its seed
(``frontend/onnx/ops/math.py``): the same on both devices, dropping about the
ratio, scaled as onnxruntime scales, and the input itself at ratio 0 or
out of training."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_onnx_ops import uniform

import shapefn
from conftest import need_opencl, opencl
from shapefn.frontend import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64
SHAPES = [(3, 2), (4,)]
# op -> (attributes, the groups of tensors after R and T, first X)
CASES = {
    "Adagrad": ({"decay_factor": 0.1, "epsilon": 1e-3, "norm_coefficient": 0.01}, "XGH"),
    "Adam": ({"alpha": 0.9, "beta": 0.8, "epsilon": 1e-2, "norm_coefficient": 0.01, "norm_coefficient_post": 0.05},
             "XGVH"),
    "Momentum-standard": ({"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01}, "XGV"),
    "Momentum-nesterov": ({"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01}, "XGV"),
}


def optimizer_model(case):
    attrs, groups = CASES[case]
    names = [f"{k}{i}" for k in groups for i in range(len(SHAPES))]
    shapes = [s for _ in groups for s in SHAPES]
    op = case.split("-")[0]
    outputs = [f"{n}_new" for n in names if n[0] != "G"]
    out_shapes = [s for n, s in zip(names, shapes, strict=True) if n[0] != "G"]
    node = helper.make_node(op, ["R", "T", *names], outputs, domain="ai.onnx.preview.training", **attrs)
    graph = helper.make_graph([node], case, [helper.make_tensor_value_info("R", F, []),
                                             helper.make_tensor_value_info("T", I64, [])]
                              + [helper.make_tensor_value_info(n, F, s) for n, s in zip(names, shapes, strict=True)],
                              [helper.make_tensor_value_info(o, F, s)
                               for o, s in zip(outputs, out_shapes, strict=True)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8), shapes


@pytest.mark.parametrize("device", ["sim", pytest.param("opencl", marks=opencl)])
@pytest.mark.parametrize("case", CASES)
def test_optimizers_match_onnx_reference(device, case):
    if device == "opencl":
        need_opencl()
    m, shapes = optimizer_model(case)
    onnx.checker.check_model(m)
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m), device), device)
    reference = ReferenceEvaluator(m)
    for step in (0, 3):
        # (second moments are sums of squares: not negative)
        feeds = [np.array(0.1, np.float32), np.array(step, np.int64)] + [np.abs(uniform(s)) for s in shapes]
        got = vm(*feeds)
        want = reference.run(None, dict(zip([i.name for i in m.graph.input], feeds, strict=True)))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def dropout_model(seed=7):
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], **({"seed": seed} if seed is not None else {}))
    graph = helper.make_graph([node], "dropout", [helper.make_tensor_value_info("x", F, ["N", 100]),
                                                  helper.make_tensor_value_info("r", F, []),
                                                  helper.make_tensor_value_info("t", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", F, None),
                               helper.make_tensor_value_info("mask", TensorProto.BOOL, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_dropout_in_training_mode_drops_by_its_seed():
    masks = {}
    for device in ("sim", "opencl"):
        if device == "opencl":
            need_opencl()
        vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(dropout_model()), device), device)
        x = uniform((50, 100)) + 4.0  # (no element is 0: a dropped one is)
        for ratio in (0.3, 0.75):
            y, mask = (v.numpy() for v in vm(x, np.array(ratio, np.float32), np.array(True)))
            np.testing.assert_allclose(y, np.where(mask, x / (1 - np.float32(ratio)), 0), rtol=1e-6)
            assert abs((~mask).mean() - ratio) < 0.03
            masks.setdefault(ratio, mask)
            np.testing.assert_array_equal(mask, masks[ratio])  # (the seed's mask, on every device and call)
        for ratio, training in ((0.0, True), (0.5, False)):
            y, mask = (v.numpy() for v in vm(x, np.array(ratio, np.float32), np.array(training)))
            np.testing.assert_array_equal(y, x)
            assert mask.all()


def test_dropout_in_training_mode_without_a_seed_is_refused():
    with pytest.raises(shapefn.UnsupportedOnnxOp, match="seed"):
        from_onnx(dropout_model(seed=None))
