"""ONNX's Reduce* operators with ``axes`` given at run time (a graph input),
and CumSum / CumProd with their ``axis`` given at run time or constant:
which axes are reduced is a value, read by the shape function
``shapefn.reduce_axes``. Each model runs on a strict sim and on opencl
(``onnx_check``) against onnxruntime, with several axes vectors, negative
and unordered ones and data with an empty axis among them."""
import numpy as np
import pytest
from onnx import TensorProto
from test_onnx_ops import i64, model, node, uniform

import shapefn
from conftest import need_opencl, opencl
from shapefn.frontend import from_onnx

F, I64 = TensorProto.FLOAT, TensorProto.INT64
OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


def reduce_model(op, keepdims, count):
    return model([node(op, ["x", "axes"], ["y"], keepdims=keepdims)],
                 [("x", F, ["A", "B", "C"]), ("axes", I64, [count])], [("y", F, None)], opset=18)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", OPS)
def test_reduce_with_axes_at_run_time_matches_onnxruntime(onnx_check, op, keepdims):
    positive = op in ("ReduceLogSum", "ReduceProd")  # (log of a positive sum; products of moderate size)
    lo, hi = (0.5, 1.5) if positive else (-3.0, 3.0)
    onnx_check(reduce_model(op, keepdims, 1),
               [[uniform((3, 4, 5), lo, hi), i64(1)], [uniform((2, 3, 4), lo, hi), i64(-1)],
                [uniform((2, 0, 3), lo, hi), i64(2)]], atol=1e-5)
    onnx_check(reduce_model(op, keepdims, 2),
               [[uniform((3, 4, 5), lo, hi), i64(2, 0)], [uniform((1, 3, 2), lo, hi), i64(-3, 1)]], atol=1e-5)


@pytest.mark.parametrize("op, want", [("ReduceMax", -np.inf), ("ReduceMin", np.inf), ("ReduceSum", 0.0),
                                      ("ReduceProd", 1.0), ("ReduceLogSumExp", -np.inf)])
def test_reduce_of_an_empty_axis_gives_the_identity(op, want):
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(reduce_model(op, 1, 1)), "sim"), shapefn.sim())
    got = vm(np.zeros((2, 0, 3), np.float32), i64(1)).numpy()
    assert got.shape == (2, 1, 3)
    np.testing.assert_array_equal(got, np.full((2, 1, 3), want, np.float32))


@pytest.mark.parametrize("axes, message", [(i64(1, -2), "twice"), (i64(3), "out of range")])
def test_bad_axes_are_refused_naming_them(axes, message):
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(reduce_model("ReduceSum", 0, len(axes))), "sim"),
                                shapefn.sim())
    with pytest.raises(ValueError, match=message):
        vm(uniform((2, 3, 4)), axes)


@opencl
def test_only_the_axes_cross_to_the_host():
    need_opencl()
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(reduce_model("ReduceMean", 0, 2)), "opencl"), "opencl")
    data = uniform((64, 32, 16))
    vm.reset_counters()
    out = vm(data, i64(0, 2))
    assert (vm.counters["d2h_copies"], vm.counters["d2h_bytes"]) == (1, 2 * 8)  # the axes, for the shape
    np.testing.assert_allclose(out.numpy(), data.mean(axis=(0, 2)), rtol=1e-5, atol=1e-6)


def cumulative_model(op, exclusive, reverse, axis=None):
    """``op`` of x [A, B, C] along ``axis`` (a graph input when None)."""
    inits = {} if axis is None else {"axis": np.array(axis, np.int64)}
    inputs = [("x", F, ["A", "B", "C"])] + ([("axis", I64, [])] if axis is None else [])
    return model([node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)], inputs,
                 [("y", F, None)], inits, opset=26 if op == "CumProd" else 14)


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_cumulative_along_an_axis_given_at_run_time_matches_onnxruntime(onnx_check, op, exclusive, reverse):
    lo, hi = (0.5, 1.5) if op == "CumProd" else (-3.0, 3.0)
    onnx_check(cumulative_model(op, exclusive, reverse),
               [[uniform((3, 4, 5), lo, hi), np.array(axis, np.int64)] for axis in (0, 1, 2, -1, -3)]
               + [[uniform((2, 0, 3), lo, hi), np.array(1, np.int64)]], atol=1e-5)


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
@pytest.mark.parametrize("op, axis", [("CumSum", 1), ("CumProd", -1)])
def test_cumulative_along_a_constant_axis_matches_onnxruntime(onnx_check, op, axis, exclusive, reverse):
    onnx_check(cumulative_model(op, exclusive, reverse, axis), [[uniform((3, 4, 5), 0.5, 1.5)]], atol=1e-5)


def test_a_cumulative_axis_out_of_range_is_refused_naming_it():
    vm = shapefn.VirtualMachine(shapefn.compile(from_onnx(cumulative_model("CumSum", 0, 0)), "sim"), shapefn.sim())
    with pytest.raises(ValueError, match="out of range"):
        vm(uniform((2, 3, 4)), np.array(3, np.int64))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_with_a_depth_given_at_run_time_matches_onnxruntime(onnx_check, axis):
    """Negative indices count from the depth; out-of-range ones give a row
    of the off value; the depth may be a float."""
    m = model([node("OneHot", ["indices", "depth", "values"], ["y"], axis=axis)],
              [("indices", I64, ["A", "B"]), ("depth", F, [])], [("y", F, None)],
              {"values": np.array([-1.0, 2.5], np.float32)}, opset=11)
    onnx_check(m, [[i64(0, 3, -1, 7).reshape(2, 2), np.array(5.0, np.float32)],
                   [np.zeros((1, 0), np.int64), np.array(3.0, np.float32)],
                   [i64(-5, 4, 2).reshape(3, 1), np.array(5.0, np.float32)]])
