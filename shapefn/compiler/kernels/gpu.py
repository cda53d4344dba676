"""GPU forms of shapefn's hand-written TIR kernels, for CUDA and OpenCL.

Each function has the name, parameters and PrimFunc signature (argument
order, shapes, dtypes, symbolic sizes) of its CPU form (``dynamic.topk``,
``count.nonzero`` / ``nonzero_1d`` / ``nonzero_of_compare`` / ``unique`` / ``unique_slices`` /
``non_max_suppression``,
``concat.sequential_concat``, ``scatter.scatter_elements``,
``scan.cumulative``) and the same results,
bit for bit where the CPU form is deterministic; it returns a PrimFunc with
explicit thread bindings that TVM's GPU code generators take as it is (no
dlight schedule). The count-sized kernels live in ``gpu_count``;
launches, barriers, scans and sorting steps in ``gpu_builder``.
"""
from __future__ import annotations

import math

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import scan
from .dynamic import topk_params, topk_sizes
from .gpu_builder import (
    ceil_log2,
    compare_exchange,
    group_barrier,
    group_sort,
    launch,
    launch_per_element,
    pair_swap,
    strided,
    unravel,
)
from .gpu_count import non_max_suppression, nonzero, nonzero_1d, nonzero_of_compare, unique, unique_slices
from .scatter import reduction_of, scatter_params, scatter_sizes
from .tir_builder import arg, flat_view, i64, local, sizes

__all__ = ["cumulative", "non_max_suppression", "nonzero", "nonzero_1d", "nonzero_of_compare", "scatter_elements",
           "sequential_concat", "topk", "unique", "unique_slices"]


# --------------------------------------------------------------------------- topk
def topk(ndim: int, axis: int, dtype: str = "float32", largest: bool = True,
         is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX TopK: ``(data, values, indices)``; ``k = values.shape[axis]``.

    Values sorted descending (``largest``) or ascending, ties broken by the
    lower index, as the CPU form; ``is_sorted=False`` gives the same order.
    One work group per row. The row's (value, index) pairs are copied to
    global scratch; with ``C`` the power of two at or above k (at most the
    row's), each aligned block of ``C`` is sorted by a bitonic network, then
    neighbouring blocks are merged pairwise in rounds, each merge keeping the
    better ``C`` of both (the first ``C`` of one against the last of the
    other reversed, then a bitonic merge): O(n log^2 C) comparisons instead
    of a whole sort's O(n log^2 n). The first k of block 0 are the result.
    The order is total (value, then index), so it does not depend on the
    sort being unstable. NaNs are not ordered.
    """
    del is_sorted  # a sorted result satisfies both settings
    axis, in_shape, out_shape, n, k = topk_sizes(ndim, axis)
    row_dims = [d for a, d in enumerate(in_shape) if a != axis]
    rows = math.prod(row_dims) if row_dims else i64(1)

    with IRBuilder() as ib, T.prim_func():
        data, values, indices = topk_params(in_shape, out_shape, dtype)
        scratch_size = tirx.max(rows * n, i64(1))
        keys = T.buffer_proxy(T.alloc_buffer((scratch_size,), dtype, scope="global"))
        ids = T.buffer_proxy(T.alloc_buffer((scratch_size,), "int64", scope="global"))
        with launch(tirx.Select(k > 0, rows, i64(0))) as (row, thread):
            coords = unravel(row, row_dims)

            def at(i):
                return tuple(coords[:axis]) + (i,) + tuple(coords[axis:])

            base = T.bind(row * n)

            def before(p, q):
                kp, kq = keys[base + p], keys[base + q]
                wins = kp > kq if largest else kp < kq
                return tirx.Or(wins, tirx.And(kp == kq, ids[base + p] < ids[base + q]))

            swap = pair_swap(keys, ids, base)

            with strided(n, thread) as i:
                keys[base + i] = data[at(i)]
                ids[base + i] = i
            group_barrier()
            block_log = T.bind(tirx.min(ceil_log2(k)[0], ceil_log2(n)[0]))
            group_sort(before, swap, n, thread, span_log_limit=block_log)
            _merge_blocks(before, swap, n, block_log, thread)
            with strided(tirx.min(k, n), thread) as i:
                values[at(i)] = keys[base + i]
                indices[at(i)] = ids[base + i]
    return ib.get()


def _merge_blocks(before, swap, size, block_log, thread) -> None:
    """Reduces sorted blocks of ``2**block_log`` at positions ``0, B, 2B,
    ...`` of ``0 .. size - 1`` to one, the best ``B`` of all, sorted, at 0.
    Round r merges the block at ``m * 2G`` with the one at ``m * 2G + G``
    (``G = B * 2**r``) into the first."""
    block = T.bind(i64(1) << block_log)
    gap_log = local("int64", block_log)
    with T.While((i64(1) << gap_log[0]) < size):
        gap = T.bind(i64(1) << gap_log[0])
        pairs = T.bind(tirx.floordiv(size - gap + 2 * gap - 1, 2 * gap))  # with a second block
        # Element i of the first block against element B-1-i of the second:
        # the better of each pair are the best B of both, in bitonic order.
        with strided(pairs << block_log, thread) as q:
            first = T.bind((q >> block_log) << (gap_log[0] + 1))
            i = q & (block - 1)
            compare_exchange(before, swap, first + i, first + gap + block - 1 - i, size)
        group_barrier()
        # A bitonic merge of each first block (all inside: the second starts after it).
        with T.serial(0, block_log) as t:
            stride_log = T.bind(block_log - 1 - t)
            stride = T.bind(i64(1) << stride_log)
            with strided(pairs << (block_log - 1), thread) as q:
                first = T.bind((q >> (block_log - 1)) << (gap_log[0] + 1))
                r = q & ((block >> 1) - 1)
                i = T.bind(first + ((r >> stride_log) << (stride_log + 1)) + (r & (stride - 1)))
                compare_exchange(before, swap, i, i + stride, size)
            group_barrier()
        gap_log[0] = gap_log[0] + 1


# --------------------------------------------------------------------------- concat
def sequential_concat(num_inputs: int, ndim: int, axis: int, dtype: str) -> tirx.PrimFunc:
    """Concatenation along ``axis``: ``(x0, ..., x{n-1}, out)``, sizes off the
    axis shared. One launch per input, one work item per element, each
    writing at the input's running offset along the axis."""
    dims = [tirx.Var(f"d{a}", "int64") for a in range(ndim)]
    extents = [tirx.Var(f"n{k}", "int64") for k in range(num_inputs)]

    def shape(extent):
        return [extent if a == axis else d for a, d in enumerate(dims)]

    inner = math.prod(dims[axis + 1:]) if axis + 1 < ndim else i64(1)
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tirx.noalias": True})
        inputs = [T.buffer_proxy(T.arg(f"x{k}", tirx.decl_buffer(shape(n), dtype, name=f"x{k}")))
                  for k, n in enumerate(extents)]
        total = sum(extents[1:], extents[0])
        out = T.buffer_proxy(T.arg("out", tirx.decl_buffer(shape(total), dtype, name="out")))
        out_flat = flat_view(out, math.prod(shape(total)), dtype)
        offset = i64(0)
        for x, n in zip(inputs, extents):
            size = math.prod(shape(n))
            x_flat = flat_view(x, size, dtype)
            with launch_per_element(size) as e:
                # e = (outer, position along the axis, inner) of x, row-major
                run = n * inner
                outer = tirx.floordiv(e, run)
                out_flat[outer * (total * inner) + offset * inner + tirx.floormod(e, run)] = x_flat[e]
            offset = offset + n
    return ib.get()


# --------------------------------------------------------------------------- scatter
def scatter_elements(ndim: int, axis: int, reduction: str, dtype: str, index_dtype: str) -> tirx.PrimFunc:
    """ONNX ScatterElements: ``(data, indices, updates, out)``; ``out`` is
    ``data`` with ``out[..., indices[p], ...] = f(out[...], updates[p])`` at
    ``axis`` for every position ``p`` of ``indices`` in row-major order
    (negative indices count from the end).

    Two launches: a copy of ``data`` (one work item per element), then one
    work item per line of ``indices`` along the axis, applying that line's
    updates in order. Updates of different lines never meet (they differ in
    a coordinate off the axis), so repeated indices reduce in exactly the
    CPU form's order, the last update winning for "update", without atomics.
    A single long line runs serially.
    """
    combine = reduction_of(reduction)  # the CPU form's arithmetic, in the same order
    data_shape, index_shape = scatter_sizes(ndim)
    line_dims = [d for a, d in enumerate(index_shape) if a != axis]
    lines = math.prod(line_dims) if line_dims else i64(1)

    with IRBuilder() as ib, T.prim_func():
        data, indices, updates, out = scatter_params(data_shape, index_shape, dtype, index_dtype)
        size = math.prod(data_shape)
        data_flat, out_flat = flat_view(data, size, dtype), flat_view(out, size, dtype)
        with launch_per_element(size) as e:
            out_flat[e] = data_flat[e]
        with launch_per_element(tirx.Select(index_shape[axis] > 0, lines, i64(0))) as line:
            coords = unravel(line, line_dims)
            with T.serial(0, index_shape[axis]) as j:
                p = tuple(coords[:axis]) + (j,) + tuple(coords[axis:])
                k = T.bind(tirx.Cast("int64", indices[p]))
                k = tirx.if_then_else(k < 0, k + data_shape[axis], k)
                target = tuple(coords[:axis]) + (T.bind(k),) + tuple(coords[axis:])
                out[target] = combine(out[target], updates[p])
    return ib.get()



# --------------------------------------------------------------------------- cumulative
def cumulative(ndim: int, axis: int, dtype: str, out_dtype: str, op: str = "sum",
               exclusive: bool = False) -> tirx.PrimFunc:
    """``scan.cumulative``: one work item per line along ``axis``,
    scanning it in order (the CPU form's sums, bit for bit)."""
    axis = scan.check(ndim, axis, op)
    shape = sizes("n", ndim)
    line_dims = [d for a, d in enumerate(shape) if a != axis]
    lines = math.prod(line_dims) if line_dims else i64(1)
    with IRBuilder() as ib, T.prim_func():
        T.func_name("cumulative")
        T.func_attr({"tirx.noalias": True})
        data = arg("data", shape, dtype)
        out = arg("out", shape, out_dtype)
        with launch_per_element(tirx.Select(shape[axis] > 0, lines, i64(0))) as line:
            coords = unravel(line, line_dims)
            acc = local(out_dtype, scan.identity(op, out_dtype))
            with T.serial(0, shape[axis]) as i:
                at = tuple(coords[:axis]) + (i,) + tuple(coords[axis:])
                value = tirx.Cast(out_dtype, data[at])
                if exclusive:
                    out[at] = acc[0]
                    acc[0] = scan.combine(op, acc[0], value)
                else:
                    acc[0] = scan.combine(op, acc[0], value)
                    out[at] = acc[0]
    return ib.get()
