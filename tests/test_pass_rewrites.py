"""The rewrites that leave fewer kernels (compiler/passes/rewrites.py) and TVM's
opaque patterns marked injective (compiler/passes/fusion_repairs.py,
``injective_kernels``): each on a small ONNX graph in the form exporters
write it, results against onnxruntime, kernels counted per call."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import shapefn
from conftest import DEVICES
from shapefn.frontend import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def run(proto, device, *args):
    """shapefn's outputs and counters for one call (after a first one), and onnxruntime's outputs."""
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(proto), device),
                                shapefn.sim(strict=True) if device == "sim" else device)
    vm(*args)
    vm.reset_counters()
    got = vm(*args)
    got = [t.numpy() for t in (got if isinstance(got, list | tuple) else [got])]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {i.name: a for i, a in zip(proto.graph.input, args)})
    return got, vm.counters, want, vm


def per_class_candidates(classes: int, limit: int):
    """torchvision's SSD post-processing per class: the column of a class's
    scores, its candidates over a threshold (``nonzero``), their scores
    (``GatherND``), the best ``min(count, limit)`` of them (``TopK``) and a
    label per kept candidate (``ConstantOfShape``); all classes'
    scores and labels concatenated. The column index is normalized as
    exporters write it (``Where(idx < 0, idx + dim, idx)`` of a ``Shape``)."""
    nodes = [helper.make_node("Shape", ["scores"], ["shape"])]
    inits = [("zero", np.array(0, np.int64)), ("limit", np.array([limit], np.int64)),
             ("threshold", np.array(0.5, np.float32))]
    tops, labels = [], []
    for c in range(1, classes + 1):
        inits.append((f"c{c}", np.array(c, np.int64)))
        nodes += [
            helper.make_node("Gather", ["shape", "one_i"], [f"dim{c}"], axis=0),
            helper.make_node("Less", [f"c{c}", "zero"], [f"neg{c}"]),
            helper.make_node("Add", [f"c{c}", f"dim{c}"], [f"wrapped{c}"]),
            helper.make_node("Where", [f"neg{c}", f"wrapped{c}", f"c{c}"], [f"idx{c}"]),
            helper.make_node("Gather", ["scores", f"idx{c}"], [f"col{c}"], axis=1),
            helper.make_node("Greater", [f"col{c}", "threshold"], [f"keep{c}"]),
            helper.make_node("NonZero", [f"keep{c}"], [f"nz{c}"]),
            helper.make_node("Transpose", [f"nz{c}"], [f"nzt{c}"], perm=[1, 0]),
            helper.make_node("GatherND", [f"col{c}", f"nzt{c}"], [f"kept{c}"]),
            helper.make_node("Shape", [f"kept{c}"], [f"count{c}"]),
            helper.make_node("Concat", [f"count{c}", "limit"], [f"both{c}"], axis=0),
            helper.make_node("ReduceMin", [f"both{c}"], [f"k{c}"], keepdims=1),
            helper.make_node("TopK", [f"kept{c}", f"k{c}"], [f"top{c}", f"top_idx{c}"]),
            helper.make_node("Shape", [f"top{c}"], [f"n{c}"]),
            helper.make_node("ConstantOfShape", [f"n{c}"], [f"label{c}"],
                             value=numpy_helper.from_array(np.array([c], np.int64))),
        ]
        tops.append(f"top{c}")
        labels.append(f"label{c}")
    inits.append(("one_i", np.array(1, np.int64)))
    nodes += [helper.make_node("Concat", tops, ["top"], axis=0), helper.make_node("Concat", labels, ["labels"], axis=0)]
    return model(nodes, [helper.make_tensor_value_info("scores", F, ["N", classes + 1])],
                 [helper.make_tensor_value_info("top", F, None), helper.make_tensor_value_info("labels", I64, None)],
                 inits)


@pytest.mark.parametrize("device", DEVICES)
def test_per_class_candidates_match_onnxruntime_in_few_kernels(device):
    """Per class: one ``nonzero`` that compares the column where it reads it,
    one gather of the kept scores, one ``TopK``; the index arithmetic and the
    ``min(count, limit)`` become sizes (no kernel), the labels one kernel
    for all classes. Only the counts cross."""
    classes, limit = 5, 3
    proto = per_class_candidates(classes, limit)
    scores = np.random.default_rng(0).uniform(0, 1, (40, classes + 1)).astype(np.float32)
    got, counters, want, vm = run(proto, device, scores)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[1].dtype == want[1].dtype
    # Per class: nonzero, the gather of its scores, TopK; then the two
    # concatenations (TopK's outputs are opaque) and the labels.
    assert counters["kernel_calls"] <= 3 * classes + 3, counters
    assert counters["d2h_copies"] == classes and counters["d2h_bytes"] == 8 * classes
    # TopK's shape function takes k from the VM's registers; nonzero's shape
    # is known from its input's type.
    assert counters["shape_func_calls"] == classes
    names = vm.executable.kernel_names
    assert any("nonzero_of_compare" in n for n in names), names
    assert not any(n.startswith(("greater", "full", "shape_to_tensor")) for n in names), names


@pytest.mark.parametrize("device", DEVICES)
def test_nonzero_of_a_comparison_matches_onnxruntime_on_edge_values(device):
    """Equal to the threshold, NaN, infinities, on either side; every
    comparison. The compared column is the middle one, the edge values in it
    (one compile per comparison: on OpenCL each is a program for PoCL to
    build), the other columns' values would answer otherwise."""
    edge = np.array([0.5, np.nan, -np.inf, np.inf, 0.25, 0.75, -0.5, 0.5], np.float32)
    values = np.stack([1 - edge, edge, -edge], axis=1)
    for op in ("Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal"):
        proto = model([helper.make_node("Gather", ["x", "col"], ["c"], axis=1),
                       helper.make_node(op, ["c", "t"], ["m"]), helper.make_node("NonZero", ["m"], ["y"])],
                      [helper.make_tensor_value_info("x", F, ["N", 3])],
                      [helper.make_tensor_value_info("y", I64, None)],
                      [("col", np.array(1, np.int64)), ("t", np.array(0.5, np.float32))])
        got, _, want, vm = run(proto, device, values)
        np.testing.assert_array_equal(got[0], want[0], err_msg=op)
        assert any("nonzero_of_compare" in n for n in vm.executable.kernel_names)


@pytest.mark.parametrize("device", DEVICES)
def test_clip_by_constant_inputs_fuses_into_the_convolution(device):
    """ONNX ``Clip`` with its bounds as inputs (``relu6``) after a
    convolution: one kernel."""
    rng = np.random.default_rng(1)
    proto = model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
                  [helper.make_tensor_value_info("x", F, [1, 3, "H", "W"])],
                  [helper.make_tensor_value_info("y", F, None)],
                  [("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                   ("lo", np.array(0.0, np.float32)), ("hi", np.array(0.5, np.float32))])
    got, counters, want, _ = run(proto, device, rng.standard_normal((1, 3, 9, 7)).astype(np.float32))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert counters["kernel_calls"] == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_reshape_left_alone_is_a_view(device):
    """A reshape between two opaque kernels (``TopK``s) copies nothing: two
    kernel calls, and the same storage seen with another shape."""
    proto = model([helper.make_node("TopK", ["x", "k"], ["a", "ai"], axis=1),
                   helper.make_node("Reshape", ["a", "flat"], ["b"]),
                   helper.make_node("TopK", ["b", "k"], ["y", "yi"])],
                  [helper.make_tensor_value_info("x", F, ["N", 6])],
                  [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("yi", I64, None)],
                  [("k", np.array([3], np.int64)), ("flat", np.array([-1], np.int64))])
    got, counters, want, _ = run(proto, device, np.random.default_rng(2).standard_normal((5, 6)).astype(np.float32))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert counters["kernel_calls"] == 2


@pytest.mark.parametrize("device", DEVICES)
def test_reshapes_of_sizes_known_at_run_time_fuse(device):
    """TVM calls a reshape of a run-time size opaque (it reads ``x[i % n]``):
    marked injective, it fuses with the elementwise ops around it."""
    proto = model([helper.make_node("Add", ["x", "one"], ["a"]),
                   helper.make_node("Reshape", ["a", "shape"], ["b"]),
                   helper.make_node("Mul", ["b", "b"], ["y"])],
                  [helper.make_tensor_value_info("x", F, ["N", 4])],
                  [helper.make_tensor_value_info("y", F, None)],
                  [("one", np.array(1.0, np.float32)), ("shape", np.array([2, -1], np.int64))])
    got, counters, want, _ = run(proto, device, np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert counters["kernel_calls"] == 1


@pytest.mark.parametrize("device", DEVICES)
def test_a_reshape_target_with_minus_one_from_sizes(device):
    """``Reshape(x, Concat(Shape(x)[0], -1))``: the target is known from
    sizes; nothing is read back for it. (Where the data's shape is known
    only at run time, inside a ``Loop``, the -1 reaches the reshape's shape
    function from the VM's registers: Keypoint R-CNN's heatmaps,
    tests/test_torchvision_models.py.)"""
    proto = model([helper.make_node("Shape", ["x"], ["s"]),
                   helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                   helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
                   helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
                   helper.make_node("Reshape", ["x", "target"], ["y"])],
                  [helper.make_tensor_value_info("x", F, ["N", "H", "W"])],
                  [helper.make_tensor_value_info("y", F, None)],
                  [("zero", np.array(0, np.int64)), ("axes", np.array([0], np.int64)),
                   ("minus_one", np.array([-1], np.int64))])
    got, counters, want, _ = run(proto, device, np.random.default_rng(4).standard_normal((3, 5, 7)).astype(np.float32))
    np.testing.assert_array_equal(got[0], want[0])
    assert counters["d2h_copies"] == 0
