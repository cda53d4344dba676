"""Elementwise kernels of any rank."""
from __future__ import annotations

from tvm import te, tirx

from .tir_builder import sizes


def scale(dtype: str = "float32", ndim: int = 1) -> tirx.PrimFunc:
    """``out = x * factor`` elementwise, factor a float scalar."""
    x = te.placeholder(sizes("n", ndim), dtype, name="x")
    factor = te.var("factor", dtype)
    out = te.compute(x.shape, lambda *i: x[i] * factor, name="out")
    return te.create_prim_func([x, factor, out])
