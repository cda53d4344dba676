"""Graph inputs that are sequences of tensors (``frontend/onnx/sequence_inputs.py``):
imported for a given length, they become that many tensor inputs, of
shapes of their own; SequenceMap over them (unrolled) and ONNX's backend
(compiling once per length seen), on sim and opencl against onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from test_onnx_ops import uniform

import shapefn
import shapefn.frontend.onnx.backend
from conftest import need_opencl, opencl
from shapefn.frontend import from_onnx

F = TensorProto.FLOAT


def mapped_model():
    """Each tensor of ``xs`` plus ``y`` (broadcast), and each one's sum, by
    SequenceMap; then every sum concatenated."""
    body = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"]), helper.make_node("ReduceSum", ["z"], ["s"], keepdims=1)],
        "body", [helper.make_tensor_value_info("x", F, ["A", "B"]), helper.make_tensor_value_info("y", F, ["B"])],
        [helper.make_tensor_value_info("z", F, None), helper.make_tensor_value_info("s", F, None)])
    nodes = [helper.make_node("SequenceMap", ["xs", "y"], ["zs", "ss"], body=body),
             helper.make_node("ConcatFromSequence", ["ss"], ["total"], axis=0)]
    seq = helper.make_tensor_sequence_value_info
    graph = helper.make_graph(nodes, "mapped", [seq("xs", F, ["A", 3]), helper.make_tensor_value_info("y", F, [3])],
                              [seq("zs", F, None), helper.make_tensor_value_info("total", F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("device", ["sim", pytest.param("opencl", marks=opencl)])
def test_a_sequence_input_matches_onnxruntime(device):
    if device == "opencl":
        need_opencl()
    m = mapped_model()
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(m, sequence_lengths={"xs": 3}), device), device)
    xs, y = [uniform((n, 3)) for n in (2, 5, 1)], uniform(3)  # (the tensors' shapes differ)
    zs, total = vm(*xs, y)
    want_zs, want_total = session.run(None, {"xs": xs, "y": y})
    assert len(zs) == len(want_zs) == 3
    for got, want in zip(zs, want_zs, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(total.numpy(), want_total, rtol=1e-5)


def test_the_backend_compiles_once_per_length():
    m = mapped_model()
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rep = shapefn.frontend.onnx.backend.prepare(m, "sim")
    for xs in ([uniform((2, 3)), uniform((4, 3))], [uniform((1, 3))], [uniform((3, 3)), uniform((0, 3))]):
        y = uniform(3)
        zs, total = rep.run([xs, y])
        want_zs, want_total = session.run(None, {"xs": xs, "y": y})
        for got, want in zip(zs, want_zs, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(total, want_total, rtol=1e-5)
    assert len(rep._compiled) == 2  # (lengths 2 and 1)
    with pytest.raises(TypeError, match="'xs' is a sequence"):
        rep.run([uniform((2, 3)), uniform(3)])


def test_a_sequence_input_without_its_length_is_refused_with_the_fix():
    with pytest.raises(shapefn.UnsupportedOnnxOp, match=r"sequence_lengths=\{'xs': n\}"):
        from_onnx(mapped_model())
    with pytest.raises(ValueError, match="not sequence inputs"):
        from_onnx(mapped_model(), sequence_lengths={"y": 2})
    with pytest.raises(ValueError, match="count of tensors"):
        from_onnx(mapped_model(), sequence_lengths={"xs": -1})


def test_an_optional_sequence_input_given_a_sequence_matches_onnxruntime():
    seq = helper.make_tensor_sequence_value_info("xs", F, ["A"])
    optional = helper.make_value_info("opt", helper.make_optional_type_proto(seq.type))
    graph = helper.make_graph([helper.make_node("OptionalGetElement", ["opt"], ["xs"]),
                               helper.make_node("ConcatFromSequence", ["xs"], ["y"], axis=0)],
                              "optional", [optional], [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = [uniform(n) for n in (3, 1, 4)]
    (got,) = shapefn.frontend.onnx.backend.prepare(m, "sim").run([xs])
    np.testing.assert_array_equal(got, session.run(None, {"opt": xs})[0])


def test_an_absent_optional_input_is_refused_by_the_backend_naming_it():
    m = helper.make_model(helper.make_graph(
        [helper.make_node("OptionalHasElement", ["opt"], ["has"])], "absent",
        [helper.make_value_info("opt", helper.make_optional_type_proto(
            helper.make_tensor_type_proto(F, [2])))], [helper.make_tensor_value_info("has", TensorProto.BOOL, [])]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with pytest.raises(TypeError, match="input 'opt' is None"):
        shapefn.frontend.onnx.backend.prepare(m, "sim").run([None])
