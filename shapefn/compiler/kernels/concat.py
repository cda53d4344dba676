"""Concatenation: one copy loop nest per input, each writing at its running
offset along the axis, so code size is linear in the number of inputs."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .tir_builder import arg


def sequential_concat(num_inputs: int, ndim: int, axis: int, dtype: str) -> tirx.PrimFunc:
    """Concatenation along ``axis`` as one copy loop nest per input, each
    writing at its running offset: ``(x0, ..., x{n-1}, out)``. Code size is
    linear in the number of inputs; sizes off the axis are shared."""
    dims = [tirx.Var(f"d{a}", "int64") for a in range(ndim)]
    extents = [tirx.Var(f"n{k}", "int64") for k in range(num_inputs)]

    def shape(extent):
        return [extent if a == axis else d for a, d in enumerate(dims)]

    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tirx.noalias": True})
        inputs = [arg(f"x{k}", shape(n), dtype) for k, n in enumerate(extents)]
        total = sum(extents[1:], extents[0])
        out = arg("out", shape(total), dtype)
        offset = tirx.const(0, "int64")
        for x, n in zip(inputs, extents):
            with T.grid(*shape(n)) as idx:
                idx = list(idx) if ndim > 1 else [idx]
                out[tuple(i + offset if a == axis else i for a, i in enumerate(idx))] = x[tuple(idx)]
            offset = offset + n
    return ib.get()
