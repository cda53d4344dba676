"""An error at run time names the model's node that raised it.

The importer names what each ONNX node binds after the node; the compiler
keeps that through TVM's passes into the executable's source marks; the VM
starts the message of an error an instruction raises with the source of the
innermost function that has one ("ONNX node 'join' (Concat): kernel ...").
A kernel's own refusal of its arguments keeps its kind (ValueError).
onnxruntime refuses the same inputs: the models are invalid for them.
"""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import shapefn
from conftest import DEVICES
from shapefn import ExecutableFormatError, Param, ProgramBuilder, _core

pytestmark = pytest.mark.native  # (the sanitized run's: shapefn's own C++ paths)

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def concat_model(name="join"):
    """relu(a) and b joined on axis 0, then reshaped to ``s``: the Concat
    needs equal widths, known only at run time; the Reshape an equal count."""
    return model([helper.make_node("Relu", ["a"], ["ra"], name="relu"),
                  helper.make_node("Concat", ["ra", "b"], ["c"], axis=0, name=name),
                  helper.make_node("Reshape", ["c", "s"], ["r"], name="to_shape")],
                 [tensor("a", F, ["n", "m"]), tensor("b", F, ["k", "j"]), tensor("s", TensorProto.INT64, [2])],
                 [tensor("r", F, None)])


def refused_by_onnxruntime(onnx_model, feeds) -> None:
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error types
        session.run(None, dict(zip(names, feeds)))


@pytest.fixture(scope="module", params=DEVICES)
def concat_vm(request):
    exe = shapefn.compile(shapefn.from_onnx(concat_model()), request.param)
    return shapefn.VirtualMachine(exe, request.param)


A = np.ones((2, 3), np.float32)


def test_valid_inputs_still_run(concat_vm):
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = concat_vm(A, b, np.array([3, 6], np.int64)).numpy()
    np.testing.assert_array_equal(out, np.concatenate([A, b]).reshape(3, 6))


def test_a_kernel_refusing_its_arguments_names_the_node_and_is_a_value_error(concat_vm):
    feeds = [A, np.ones((2, 4), np.float32), np.array([4, 4], np.int64)]
    refused_by_onnxruntime(concat_model(), feeds)
    with pytest.raises(ValueError, match=r"^ONNX node 'join' \(Concat\): kernel '\w+' failed: ValueError: "
                                         r"Mismatched") as info:
        concat_vm(*feeds)
    assert str(info.value).count("ONNX node") == 1
    # The VM goes on.
    out = concat_vm(A, A, np.array([3, 4], np.int64)).numpy()
    np.testing.assert_array_equal(out, np.ones((3, 4), np.float32))


def test_a_shape_function_refusing_names_the_node(concat_vm):
    feeds = [A, A, np.array([5, 3], np.int64)]
    refused_by_onnxruntime(concat_model(), feeds)
    with pytest.raises(ValueError, match=r"^ONNX node 'to_shape' \(Reshape\): relax.reshape: cannot reshape"):
        concat_vm(*feeds)


def test_a_node_without_a_name_is_named_by_its_output():
    exe = shapefn.compile(shapefn.from_onnx(concat_model(name="")), "sim")
    vm = shapefn.VirtualMachine(exe, "sim")
    with pytest.raises(ValueError, match=r"^ONNX node Concat computing 'c': kernel"):
        vm(A, np.ones((1, 2), np.float32), np.array([3, 3], np.int64))


def test_the_graph_output_node_is_named():
    """The node computing a graph output binds it under the output's alias."""
    onnx_model = model([helper.make_node("Concat", ["a", "b"], ["c"], axis=0, name="last")],
                       [tensor("a", F, ["n", "m"]), tensor("b", F, ["k", "j"])], [tensor("c", F, None)])
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(onnx_model), "sim"), "sim")
    with pytest.raises(ValueError, match=r"^ONNX node 'last' \(Concat\): "):
        vm(A, np.ones((1, 2), np.float32))


def test_a_fused_group_names_its_nodes():
    """A convolution and its activation run as one kernel: a window larger
    than the image names both."""
    weight = helper.make_tensor("w", F, [4, 2, 3, 3], np.ones(72, np.float32))
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
                               helper.make_node("Relu", ["y"], ["z"], name="act")],
                              "g", [tensor("x", F, [1, 2, "h", "w"])], [tensor("z", F, None)], [weight])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.ones((1, 2, 1, 1), np.float32)
    refused_by_onnxruntime(onnx_model, [x])
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(onnx_model), "sim"), "sim")
    with pytest.raises(ValueError, match=r"^ONNX node 'conv' \(Conv\) and ONNX node 'act' \(Relu\): negative "
                                         r"dimension"):
        vm(x)
    np.testing.assert_array_equal(vm(np.ones((1, 2, 3, 3), np.float32)).numpy(), np.full((1, 4, 1, 1), 18.0))


@pytest.mark.parametrize("device", DEVICES)
def test_a_node_inside_a_branch_is_named(device):
    """An If whose taken branch reshapes to a count that differs: the
    branch's node is named, not the If."""
    then_graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="inner_reshape")],
                                   "then", [], [tensor("y", F, None)])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["z"], name="inner_neg")],
                                   "else", [], [tensor("z", F, None)])
    onnx_model = model([helper.make_node("If", ["flag"], ["out"], name="choose", then_branch=then_graph,
                                         else_branch=else_graph)],
                       [tensor("x", F, ["n"]), tensor("s", TensorProto.INT64, [1]),
                        tensor("flag", TensorProto.BOOL, [])],
                       [tensor("out", F, None)])
    x = np.arange(6, dtype=np.float32)
    feeds = [x, np.array([7], np.int64), np.array(True)]
    refused_by_onnxruntime(onnx_model, feeds)
    vm = shapefn.VirtualMachine(shapefn.compile(shapefn.from_onnx(onnx_model), device), device)
    with pytest.raises(ValueError, match=r"^ONNX node 'inner_reshape' \(Reshape\): relax.reshape: "):
        vm(*feeds)
    np.testing.assert_array_equal(vm(x, np.array([7], np.int64), np.array(False)).numpy(), -x)


def test_sources_are_carried_by_a_saved_executable(tmp_path):
    exe = shapefn.compile(shapefn.from_onnx(concat_model()), "sim")
    named = {source for _, source in exe.sources["main"]}
    assert {"ONNX node 'join' (Concat)", "ONNX node 'to_shape' (Reshape)", "ONNX node 'relu' (Relu)"} <= named
    exe.save(tmp_path / "m.sfx")
    loaded = shapefn.Executable.load(tmp_path / "m.sfx")
    assert loaded.sources == exe.sources
    with pytest.raises(ValueError, match=r"^ONNX node 'join' \(Concat\): "):
        shapefn.VirtualMachine(loaded, "sim")(A, np.ones((1, 2), np.float32), np.array([3, 3], np.int64))


# ---- the VM's rule, on hand-built programs --------------------------------------


def rows_error_program(caller_source: str, callee_source: str) -> ProgramBuilder:
    """``main`` calls ``inner``, which reads element 5 of a 1-element shape
    (an IndexError), with the given sources around the call and the read."""
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "float32", ["n"])])
    fb.source = caller_source
    out = fb.call("inner", [fb.args[0]])
    fb.source = ""
    fb.ret(out)
    inner = pb.function("inner", [Param("x", "float32", ["n"], "any")])
    shape = inner.shape_of(inner.args[0])
    inner.source = callee_source
    value = inner.shape_get(shape, 5)
    inner.ret(value)
    return pb


@pytest.mark.parametrize("caller, callee, prefix", [
    ("ONNX node 'loop' (Loop)", "ONNX node 'body_gather' (Gather)", "ONNX node 'body_gather' (Gather): "),
    ("ONNX node 'loop' (Loop)", "", "ONNX node 'loop' (Loop): "),
    ("", "", ""),
])
def test_the_innermost_source_names_the_error_once(caller, callee, prefix):
    vm = shapefn.VirtualMachine(rows_error_program(caller, callee).build(), "host")
    with pytest.raises(IndexError) as info:
        vm(np.zeros(3, np.float32))
    message = str(info.value)
    assert message.startswith(prefix) and "index 5" in message
    assert message.count("ONNX node") == (1 if prefix else 0)


def function_parts(sources):
    pb = ProgramBuilder()
    fb = pb.function("main", [Param("x", "int64", [])])
    fb.ret(fb.add(fb.args[0], fb.load_int(1)))
    (part,) = [f._finish() for f in pb._functions]
    part["sources"] = sources
    return part


@pytest.mark.parametrize("sources, problem", [
    ([(1, "b"), (0, "a")], "source mark at instruction 0"),
    ([(0, "a"), (0, "b")], "source mark at instruction 0"),
    ([(3, "a")], "source mark at instruction 3"),
    ([(-1, "a")], "source mark at instruction -1"),
])
def test_the_verifier_refuses_source_marks_out_of_order_or_range(sources, problem):
    with pytest.raises(ExecutableFormatError, match=problem):
        _core.Executable.from_parts([function_parts(sources)], [], [], [], "")


def test_source_marks_in_range_are_accepted_and_round_trip():
    core = _core.Executable.from_parts([function_parts([(0, "a"), (2, "b")])], [], [], [], "")
    assert core.sources == {"main": [(0, "a"), (2, "b")]}
    assert _core.Executable.deserialize(core.serialize()).sources == core.sources


def test_import_names_bindings_after_nodes():
    """What each node binds (and what it is cast from, or aliased as a
    graph output) is named after the node's output."""
    sources = dict(shapefn.from_onnx(concat_model()).attrs["shapefn.sources"])
    assert {"ra", "c", "r"} <= set(sources)
    assert set(sources.values()) == {"ONNX node 'relu' (Relu)", "ONNX node 'join' (Concat)",
                                     "ONNX node 'to_shape' (Reshape)"}
    assert all(name.split("_")[0] == {"Relu": "ra", "Concat": "c", "Reshape": "r"}[text.split("(")[-1][:-1]]
               for name, text in sources.items())
