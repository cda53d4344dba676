"""GPU forms of shapefn's hand-written TIR kernels, for CUDA and OpenCL.

Each function has the name, parameters and PrimFunc signature (argument
order, shapes, dtypes, symbolic sizes) of its CPU form (``dynamic.topk``,
``count.nonzero`` / ``nonzero_1d`` / ``nonzero_of_compare`` / ``unique`` / ``unique_slices`` /
``non_max_suppression``,
``concat.sequential_concat``, ``scatter.scatter_elements`` / ``scatter_nd``,
``scan.cumulative``) and the same results,
bit for bit where the CPU form is deterministic; it returns a PrimFunc with
explicit thread bindings that TVM's GPU code generators take as it is (no
dlight schedule). The count-sized kernels live in ``gpu_count`` and ``gpu_nms``;
launches, barriers, scans and sorting steps in ``gpu_builder``.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..passes.index_checks import from_end
from . import scan
from .dynamic import topk_order, topk_params, topk_sizes
from .gpu_builder import (
    bitonic_pair,
    ceil_log2,
    ceildiv,
    compare_exchange,
    group_barrier,
    group_sort,
    launch,
    launch_per_element,
    pair_swap,
    shared_barrier,
    strided,
    unravel,
)
from .gpu_count import nonzero, nonzero_1d, nonzero_of_compare, unique, unique_slices
from .gpu_nms import non_max_suppression
from .scatter import reduction_of, scatter_params, scatter_sizes
from .tir_builder import arg, flat_view, i64, local, sizes

__all__ = ["cumulative", "non_max_suppression", "nonzero", "nonzero_1d", "nonzero_of_compare", "scatter_elements",
           "scatter_nd",
           "sequential_concat", "topk", "unique", "unique_slices"]


# --------------------------------------------------------------------------- topk
# Bytes of shared memory a top-k work group sorts its row in (keys and int32
# indices), by _SORT_THREADS work items; longer rows are sorted in global
# memory by THREADS.
_SHARED_SORT_BYTES = 32 * 1024
_SORT_THREADS_LOG = 8
_SORT_THREADS = 1 << _SORT_THREADS_LOG


def topk(ndim: int, axis: int, dtype: str = "float32", largest: bool = True,
         is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX TopK: ``(data, values, indices)``; ``k = values.shape[axis]``.

    Values sorted descending (``largest``) or ascending, ties broken by the
    lower index, as the CPU form; ``is_sorted=False`` gives the same order.
    One work group per row. A row that fits in ``_SHARED_SORT_BYTES``
    (4,096 float32 values) is sorted whole in shared memory (one launch);
    a longer one (another launch) is copied to global scratch and, with
    ``C`` the power of two at or above k (at most the row's), each aligned
    block of ``C`` is sorted by a
    bitonic network, then neighbouring blocks are merged pairwise in rounds,
    each merge keeping the better ``C`` of both (the first ``C`` of one
    against the last of the other reversed, then a bitonic merge):
    O(n log^2 C) comparisons instead of a whole sort's O(n log^2 n). The
    first k of block 0 are the result. The order is total (value, NaN the
    largest, then index: ``topk_order``), so it does not depend on the sort
    being unstable.
    """
    del is_sorted  # a sorted result satisfies both settings
    axis, in_shape, out_shape, n, k = topk_sizes(ndim, axis)
    row_dims = [d for a, d in enumerate(in_shape) if a != axis]
    rows = math.prod(row_dims) if row_dims else i64(1)
    capacity = 1 << int(math.log2(_SHARED_SORT_BYTES // (tvm.DataType(dtype).bits // 8 + 4)))

    with IRBuilder() as ib, T.prim_func():
        data, values, indices = topk_params(in_shape, out_shape, dtype)

        def at(coords, i):
            return tuple(coords[:axis]) + (i,) + tuple(coords[axis:])

        scratch_size = tirx.max(rows * n, i64(1))
        keys = T.buffer_proxy(T.alloc_buffer((scratch_size,), dtype, scope="global"))
        ids = T.buffer_proxy(T.alloc_buffer((scratch_size,), "int64", scope="global"))
        fits = n <= capacity
        with launch(tirx.Select(tirx.all(k > 0, fits), rows, i64(0)), _SORT_THREADS) as (row, thread):
            coords = unravel(row, row_dims)
            with _sort_in_shared(lambda i: data[at(coords, i)], n, k, dtype, largest, capacity, thread) \
                    as (i, value, index):
                values[at(coords, i)] = value
                indices[at(coords, i)] = index

        with launch(tirx.Select(tirx.all(k > 0, tirx.Not(fits)), rows, i64(0))) as (row, thread):
            coords = unravel(row, row_dims)
            base = T.bind(row * n)

            def before(p, q):
                return _ordered(largest, keys[base + p], ids[base + p], keys[base + q], ids[base + q])

            with strided(n, thread) as i:
                keys[base + i] = data[at(coords, i)]
                ids[base + i] = i
            group_barrier()
            _sort_best(before, pair_swap(keys, ids, base), n, k, thread, group_barrier)
            with strided(tirx.min(k, n), thread) as i:
                values[at(coords, i)] = keys[base + i]
                indices[at(coords, i)] = ids[base + i]
    return ib.get()


def _ordered(largest: bool, key_p, id_p, key_q, id_q):
    """Whether (key_p, id_p) belongs before (key_q, id_q): ``topk_order``."""
    return topk_order(largest, key_p, id_p, key_q, id_q)


@contextlib.contextmanager
def _sort_in_shared(load, size, k, dtype, largest, capacity, thread) -> Iterator[tuple]:
    """The best ``k`` of ``size`` values (``load(i)``, ``size`` at most
    ``capacity``) sorted by a bitonic network in shared memory by a work
    group of ``_SORT_THREADS``; yields each of them in order as ``(i,
    value, index)``. The row is padded to a power of two of at least two
    per work item with values that sort last (the worst value, the largest
    index), so that every comparator of every step is real. Each work item
    reads its comparators' pairs into registers, then, after a barrier,
    writes them: TVM needs no barrier of its own (it cannot place one in a
    condition)."""
    keys = T.buffer_proxy(T.alloc_buffer((capacity,), dtype, scope="shared"))
    ids = T.buffer_proxy(T.alloc_buffer((capacity,), "int32", scope="shared"))
    size_log = T.bind(tirx.max(ceil_log2(size)[0], i64(_SORT_THREADS_LOG + 1)))
    padded = T.bind(i64(1) << size_log)
    if dtype.startswith(("float", "bfloat")):
        # (after every value, ties broken by the padding's highest index; for
        # the smallest, that is NaN: topk_order puts it last)
        worst = tirx.const(float("-inf") if largest else float("nan"), dtype)
    else:
        worst = tirx.min_value(dtype) if largest else tirx.max_value(dtype)
    with T.serial(0, tirx.floordiv(padded, i64(_SORT_THREADS))) as r:
        i = T.bind(r * _SORT_THREADS + thread)
        keys[i] = tirx.if_then_else(i < size, load(i), worst)
        ids[i] = tirx.if_then_else(i < size, tirx.Cast("int32", i), tirx.max_value("int32"))
    shared_barrier()
    most = capacity // (2 * _SORT_THREADS)  # comparators per work item and step, at most
    # Positions in int32 (int64 arithmetic is several instructions on GPUs);
    # the pair count in a local (TVM's simplifier wrongly proves
    # `r < padded >> 9` false).
    pairs = local("int32", tirx.Cast("int32", tirx.floordiv(padded, i64(2 * _SORT_THREADS))))[0]
    item = T.bind(tirx.Cast("int32", thread))
    held = [[local(t, 0) for t in ("int32", "int32", dtype, dtype, "int32", "int32")] for _ in range(most)]
    with T.serial(0, tirx.Cast("int32", size_log)) as s:
        with T.serial(0, s + 1) as t:
            for r, (at_i, at_j, key_i, key_j, id_i, id_j) in enumerate(held):  # (unrolled: registers)
                with T.If(r < pairs):
                    with T.Then():
                        i, j = bitonic_pair(r * _SORT_THREADS + item, s + 1, s - t)
                        at_i[0], at_j[0] = i, j
                        key_i[0], key_j[0], id_i[0], id_j[0] = keys[i], keys[j], ids[i], ids[j]
            shared_barrier()
            for r, (at_i, at_j, key_i, key_j, id_i, id_j) in enumerate(held):
                with T.If(r < pairs):
                    with T.Then():
                        swap = T.bind(_ordered(largest, key_j[0], id_j[0], key_i[0], id_i[0]))
                        keys[at_i[0]] = tirx.Select(swap, key_j[0], key_i[0])
                        ids[at_i[0]] = tirx.Select(swap, id_j[0], id_i[0])
                        keys[at_j[0]] = tirx.Select(swap, key_i[0], key_j[0])
                        ids[at_j[0]] = tirx.Select(swap, id_i[0], id_j[0])
            shared_barrier()
    best = T.bind(tirx.min(k, size))
    with T.serial(0, ceildiv(best, i64(_SORT_THREADS))) as r:
        i = T.bind(r * _SORT_THREADS + thread)
        with T.If(i < best):
            with T.Then():
                yield i, keys[i], tirx.Cast("int64", ids[i])


def _sort_best(before, swap, size, k, thread, barrier) -> None:
    """Puts the best ``k`` of positions ``0 .. size - 1``, sorted, first."""
    block_log = T.bind(tirx.min(ceil_log2(k)[0], ceil_log2(size)[0]))
    group_sort(before, swap, size, thread, span_log_limit=block_log, barrier=barrier)
    _merge_blocks(before, swap, size, block_log, thread, barrier)


def _merge_blocks(before, swap, size, block_log, thread, barrier) -> None:
    """Reduces sorted blocks of ``2**block_log`` at positions ``0, B, 2B,
    ...`` of ``0 .. size - 1`` to one, the best ``B`` of all, sorted, at 0.
    Round r merges the block at ``m * 2G`` with the one at ``m * 2G + G``
    (``G = B * 2**r``) into the first, until one block spans them all."""
    block = T.bind(i64(1) << block_log)
    rounds = T.bind(tirx.max(ceil_log2(size)[0] - block_log, i64(0)))
    with T.serial(0, rounds) as round_:
        gap_log = T.bind(block_log + round_)
        gap = T.bind(i64(1) << gap_log)
        pairs = T.bind(tirx.floordiv(size - gap + 2 * gap - 1, 2 * gap))  # with a second block
        # Element i of the first block against element B-1-i of the second:
        # the better of each pair are the best B of both, in bitonic order.
        with strided(pairs << block_log, thread) as q:
            first = T.bind((q >> block_log) << (gap_log + 1))
            i = q & (block - 1)
            compare_exchange(before, swap, first + i, first + gap + block - 1 - i, size)
        barrier()
        # A bitonic merge of each first block (all inside: the second starts after it).
        with T.serial(0, block_log) as t:
            stride_log = T.bind(block_log - 1 - t)
            stride = T.bind(i64(1) << stride_log)
            with strided(pairs << (block_log - 1), thread) as q:
                first = T.bind((q >> (block_log - 1)) << (gap_log + 1))
                r = q & ((block >> 1) - 1)
                i = T.bind(first + ((r >> stride_log) << (stride_log + 1)) + (r & (stride - 1)))
                compare_exchange(before, swap, i, i + stride, size)
            barrier()


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
                k = from_end(indices[p], data_shape[axis], f"scatter_elements: index along axis {axis}")
                target = tuple(coords[:axis]) + (k,) + tuple(coords[axis:])
                out[target] = combine(out[target], updates[p])
    return ib.get()



def scatter_nd(data_ndim: int, index_ndim: int, depth: int, reduction: str, dtype: str,
               index_dtype: str) -> tirx.PrimFunc:
    """``scatter.scatter_nd``: a copy of ``data``, then one work item per
    element of a slice, applying every index tuple's update to it in order
    (repeated tuples reduce in the CPU form's order, without atomics)."""
    combine = reduction_of(reduction)
    data_shape = [tirx.Var(f"d{a}", "int64") for a in range(data_ndim)]
    lead = [tirx.Var(f"i{a}", "int64") for a in range(index_ndim - 1)]
    index_shape = [*lead, tirx.IntImm("int64", depth)]
    slice_dims = data_shape[depth:]
    with IRBuilder() as ib, T.prim_func():
        T.func_attr({"tirx.noalias": True})
        data, indices = arg("data", data_shape, dtype), arg("indices", index_shape, index_dtype)
        updates, out = arg("updates", [*lead, *slice_dims], dtype), arg("out", data_shape, dtype)
        size = math.prod(data_shape)
        data_flat, out_flat = flat_view(data, size, dtype), flat_view(out, size, dtype)
        with launch_per_element(size) as e:
            out_flat[e] = data_flat[e]
        with launch_per_element(math.prod(slice_dims) if slice_dims else i64(1)) as e:
            rest = tuple(unravel(e, slice_dims))
            with T.serial(0, math.prod(lead) if lead else i64(1)) as t:
                at = tuple(unravel(t, lead))
                coords = tuple(from_end(indices[(*at, i64(j))], data_shape[j],
                                        f"scatter_nd: coordinate {j} of an index tuple") for j in range(depth))
                out[coords + rest] = combine(out[coords + rest], updates[at + rest])
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
