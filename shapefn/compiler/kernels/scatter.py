"""ScatterElements: copies of ``data`` updated at the positions the indices
name, with a reduction."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..passes.index_checks import from_end
from .tir_builder import arg

# How an update combines with the value it lands on (the GPU form reuses these).
SCATTER_REDUCTIONS = {
    "update": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "mean": lambda old, new: (old + new) / 2,  # as TVM's: pairwise, in order
    "min": tirx.min,
    "max": tirx.max,
}


def scatter_elements(ndim: int, axis: int, reduction: str, dtype: str, index_dtype: str) -> tirx.PrimFunc:
    """ONNX ScatterElements: ``(data, indices, updates, out)``; ``out`` is
    ``data`` with ``out[..., indices[p], ...] = f(out[...], updates[p])`` at
    ``axis`` for every position ``p`` of ``indices`` in row-major order
    (negative indices count from the end).

    TVM's kernel walks a flat index and reads the N-d tensors through it:
    with symbolic sizes every read becomes a chain of divisions and remainders
    by products of sizes, which took LLVM minutes for Faster R-CNN's 4-d
    scatter (docs/bench/compiler.md); nested loops over the
    indices' own shape leave plain strided addressing. It also addresses
    ``data`` with the indices' sizes: wrong when the indices are narrower
    than the data in a dimension other than the first, the axis and the one
    after it (ONNX allows any indices no larger than the data).
    """
    combine = reduction_of(reduction)
    data_shape, index_shape = scatter_sizes(ndim)
    with IRBuilder() as ib, T.prim_func():
        data, indices, updates, out = scatter_params(data_shape, index_shape, dtype, index_dtype)
        with T.grid(*data_shape) as p:
            p = tuple(p) if ndim > 1 else (p,)
            out[p] = data[p]
        with T.grid(*index_shape) as p:
            p = tuple(p) if ndim > 1 else (p,)
            k = from_end(indices[p], data_shape[axis], f"scatter_elements: index along axis {axis}")
            target = p[:axis] + (k,) + p[axis + 1:]
            out[target] = combine(out[target], updates[p])
    return ib.get()


def scatter_nd(data_ndim: int, index_ndim: int, depth: int, reduction: str, dtype: str,
               index_dtype: str) -> tirx.PrimFunc:
    """ONNX ScatterND: ``(data, indices, updates, out)``; ``out`` is
    ``data`` with ``out[indices[p]] = f(out[indices[p]], updates[p])`` for
    every index tuple ``p`` of ``indices`` (its last dimension, ``depth``
    long) in row-major order, each tuple naming a slice of ``data``'s last
    ``data_ndim - depth`` dimensions; every coordinate checked.

    TVM's kernel reads the index tuples without a bound: a coordinate out of
    range wrote outside the output (heap corruption, found by trying)."""
    combine = reduction_of(reduction)
    data_shape = [tirx.Var(f"d{a}", "int64") for a in range(data_ndim)]
    lead = [tirx.Var(f"i{a}", "int64") for a in range(index_ndim - 1)]
    index_shape = [*lead, tirx.IntImm("int64", depth)]
    update_shape = [*lead, *data_shape[depth:]]
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tirx.noalias": True})
        data, indices = arg("data", data_shape, dtype), arg("indices", index_shape, index_dtype)
        updates, out = arg("updates", update_shape, dtype), arg("out", data_shape, dtype)
        with T.grid(*data_shape) as p:
            p = tuple(p) if data_ndim > 1 else (p,)
            out[p] = data[p]
        with T.grid(*lead, *data_shape[depth:]) as q:
            q = tuple(q) if len(lead) + data_ndim - depth > 1 else (q,)
            at, rest = q[:len(lead)], q[len(lead):]
            coords = tuple(from_end(indices[(*at, tirx.IntImm("int64", j))], data_shape[j],
                                    f"scatter_nd: coordinate {j} of an index tuple") for j in range(depth))
            out[coords + rest] = combine(out[coords + rest], updates[q])
    return ib.get()


def reduction_of(reduction: str):
    """How an update combines with its target under ``reduction``."""
    if reduction not in SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_elements: unsupported reduction {reduction!r}")
    return SCATTER_REDUCTIONS[reduction]


def scatter_sizes(ndim: int) -> tuple[list[tirx.Var], list[tirx.Var]]:
    """The symbolic sizes of the data (and output) and of the indices (and updates)."""
    return [tirx.Var(f"d{a}", "int64") for a in range(ndim)], [tirx.Var(f"i{a}", "int64") for a in range(ndim)]


def scatter_params(data_shape, index_shape, dtype: str, index_dtype: str) -> tuple:
    """Declares the parameters of the scatter kernel being built:
    ``(data, indices, updates, out)``."""
    T.func_attr({"tirx.noalias": True})
    return (arg("data", data_shape, dtype), arg("indices", index_shape, index_dtype),
            arg("updates", index_shape, dtype), arg("out", data_shape, dtype))
