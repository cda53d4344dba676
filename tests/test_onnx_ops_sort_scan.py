"""ONNX operators whose Relax forms TVM 0.27 imports but does not legalize,
lowered by shapefn's own kernels: Unique along an axis and in order of
first occurrence (``sorted=0``), TopK with a constant k, CumSum. Each
through ``onnx_check`` (compiled once per device, run on sim and opencl at
several shapes, compared with onnxruntime exactly)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import DEVICES

# onnx_check runs these on every device: TopK, NonZero, Unique, NMS and the cumulative ops run shapefn's own GPU forms.
ONNX_CHECK_DEVICES = DEVICES

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
rng = np.random.default_rng(0)


def model(nodes, inputs, outputs, inits=(), opset=11):
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def few_values(shape, values=3):
    """Small integers as floats: repeated slices and elements, exact ties."""
    return rng.integers(0, values, shape).astype(np.float32)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("is_sorted", [1, 0])
def test_unique_along_an_axis(onnx_check, axis, is_sorted):
    m = model([helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], axis=axis, sorted=is_sorted)],
              [("x", F, ["a", "b", "c"])],
              [("y", F, None), ("indices", I64, None), ("inverse", I64, None), ("counts", I64, None)])
    # Two values over few positions: slices repeat along every axis.
    onnx_check(m, [[few_values((5, 3, 2), 2)], [few_values((2, 4, 3), 2)], [few_values((6, 1, 1), 2)],
                   [few_values((0, 3, 2))]])


def test_unique_of_whole_slices_that_differ_late(onnx_check):
    """Slices equal up to their last element sort by it."""
    x = np.zeros((4, 5), np.float32)
    x[:, -1] = [3, 1, 3, 2]
    m = model([helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], axis=0)],
              [("x", F, ["a", "b"])],
              [("y", F, None), ("indices", I64, None), ("inverse", I64, None), ("counts", I64, None)])
    onnx_check(m, [[x], [x.T.copy()]])


@pytest.mark.parametrize("dtype", [F, I64])
def test_unique_in_order_of_first_occurrence(onnx_check, dtype):
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    m = model([helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], sorted=0)],
              [("x", dtype, ["n"])],
              [("y", dtype, None), ("indices", I64, None), ("inverse", I64, None), ("counts", I64, None)])
    onnx_check(m, [[np.array(v, np_dtype)] for v in ([3, 1, 3, 2, 1, 0], [7], [5, 5, 5], [])])


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("axis", [1, 0, -1])
def test_topk_with_a_constant_k(onnx_check, largest, axis):
    m = model([helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)],
              [("x", F, [4, 6])], [("values", F, None), ("indices", I64, None)], {"k": np.array([3], np.int64)})
    # Ties broken by the lower index, as onnxruntime does.
    onnx_check(m, [[few_values((4, 6))], [rng.standard_normal((4, 6)).astype(np.float32)]])


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(onnx_check, exclusive, reverse, axis):
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
              [("x", F, ["n", 5])], [("y", F, None)], {"axis": np.array(axis, np.int64)})
    onnx_check(m, [[few_values((n, 5), 5)] for n in (4, 1, 0)])


@pytest.mark.parametrize("dtype", [I32, I64])
def test_cumsum_of_integers(onnx_check, dtype):
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    m = model([helper.make_node("CumSum", ["x", "axis"], ["y"])], [("x", dtype, ["n"])], [("y", dtype, None)],
              {"axis": np.array(0, np.int32)})
    onnx_check(m, [[rng.integers(-100, 100, n).astype(np_dtype)] for n in (7, 1, 0)])
