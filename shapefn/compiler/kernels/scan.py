"""Cumulative sums and products along an axis (ONNX CumSum; Relax
``cumsum`` / ``cumprod``), which TVM 0.27's ``LegalizeOps`` leaves
unlowered (TVM's own pipelines dispatch them to library scans later).

``cumulative(ndim, axis, dtype, out_dtype, op, exclusive)`` is one kernel
``(data, out)`` for every shape: each line along ``axis`` is scanned in
order, accumulating in ``out_dtype`` (so results are those of a sequential
scan, as onnxruntime's). Its GPU form (``gpu.cumulative``) scans
each line in a work item of its own.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .tir_builder import arg, local, loops, sizes

OPS = ("sum", "prod")


def combine(op: str, acc, value):
    return acc + value if op == "sum" else acc * value


def identity(op: str, dtype: str):
    return tirx.const(0 if op == "sum" else 1, dtype)


def check(ndim: int, axis: int, op: str) -> int:
    if op not in OPS:
        raise ValueError(f"cumulative: op must be one of {OPS}, got {op!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"cumulative: axis {axis} out of range for rank {ndim}")
    return axis % ndim


def cumulative(ndim: int, axis: int, dtype: str, out_dtype: str, op: str = "sum",
               exclusive: bool = False) -> tirx.PrimFunc:
    """``out[..., i, ...] = data[..., 0, ...] (op) ... (op) data[..., i, ...]``
    along ``axis`` (up to ``i - 1`` with ``exclusive``)."""
    axis = check(ndim, axis, op)
    shape = sizes("n", ndim)
    with IRBuilder() as ib, T.prim_func():
        T.func_name("cumulative")
        T.func_attr({"tirx.noalias": True})
        data = arg("data", shape, dtype)
        out = arg("out", shape, out_dtype)
        with loops([d for a, d in enumerate(shape) if a != axis]) as line:
            acc = local(out_dtype, identity(op, out_dtype))
            with T.serial(0, shape[axis]) as i:
                at = tuple(line[:axis]) + (i,) + tuple(line[axis:])
                value = tirx.Cast(out_dtype, data[at])
                if exclusive:
                    out[at] = acc[0]
                    acc[0] = combine(op, acc[0], value)
                else:
                    acc[0] = combine(op, acc[0], value)
                    out[at] = acc[0]
    return ib.get()
