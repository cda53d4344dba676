"""GPU forms of the count-sized kernels (``count``): nonzero
and unique (NMS: ``gpu_nms``), with the CPU forms' signatures and results.

Each still writes its result at the front of upper-bound outputs and the
number of results to ``count`` (int64 ``[1]``), from the device, so the VM
reads back only that count. Results are compacted in order by prefix sums:
each work group counts what its tile of the input keeps, one work group
scans the tiles' counts, and each group then writes its tile's results at
its offset, work items ordered by a prefix sum within the group.
"""
from __future__ import annotations

import math

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .count import (
    compare_params,
    compare_rows,
    is_nonzero,
    nonzero_params,
    unique_params,
    unique_slices_params,
)
from .gpu_builder import (
    THREADS,
    bitonic_pair,
    ceildiv,
    compare_exchange,
    group_exclusive_scan,
    group_scan_array,
    launch,
    launch_per_element,
    pair_swap,
    unravel,
)
from .tir_builder import arg, flat_view, i64, local, sizes

# Consecutive elements per work item in a compaction tile: fewer scans and
# tiles than one element each.
_ITEMS = 4
_TILE = THREADS * _ITEMS


# --------------------------------------------------------------------------- compaction
def _item_flags(flag, size, tile, thread):
    """How many of this work item's elements of the tile are flagged."""
    flagged = local("int64", 0)
    with T.serial(0, _ITEMS) as e:
        f = T.bind(tile * _TILE + thread * _ITEMS + e)
        with T.If(f < size):
            with T.Then():
                with T.If(flag(f)):
                    with T.Then():
                        flagged[0] = flagged[0] + 1
    return flagged[0]


def _count_tiles(flag, size, tile_counts) -> None:
    """One launch: ``tile_counts[t]`` = flagged elements of tile ``t``."""
    with launch(ceildiv(size, i64(_TILE))) as (tile, thread):
        _, total = group_exclusive_scan(_item_flags(flag, size, tile, thread), thread)
        with T.If(thread == 0):
            with T.Then():
                tile_counts[tile] = total


def _scan_tiles(tile_counts, tiles, count) -> None:
    """One launch of one group: the tiles' counts become their offsets
    (exclusive prefix sums, in place) and ``count[0]`` their total."""
    with launch(i64(1)) as (_, thread):
        total = group_scan_array(tile_counts, tile_counts, tiles, thread)
        with T.If(thread == 0):
            with T.Then():
                count[0] = total


def _for_each_element(flag, size, tile_offsets, body) -> None:
    """One launch over every element ``f`` of ``0 .. size - 1``:
    ``body(f, flagged, rank)`` with ``rank`` the number of flagged elements
    before ``f`` (``tile_offsets`` as ``_scan_tiles`` leaves them)."""
    with launch(ceildiv(size, i64(_TILE))) as (tile, thread):
        before, _ = group_exclusive_scan(_item_flags(flag, size, tile, thread), thread)
        rank = local("int64", tile_offsets[tile] + before)
        with T.serial(0, _ITEMS) as e:
            f = T.bind(tile * _TILE + thread * _ITEMS + e)
            with T.If(f < size):
                with T.Then():
                    flagged = T.bind(flag(f))
                    body(f, flagged, rank[0])
                    rank[0] = rank[0] + tirx.Cast("int64", flagged)


def _compact(flag, size, count, store) -> None:
    """A compaction in three launches (count per tile, scan of the tiles'
    counts, which writes ``count[0]``, then every flagged element):
    ``store(f, rank)`` for each flagged ``f`` of ``0 .. size - 1``, ``rank``
    the number of flagged elements before it."""
    tile_counts = _tile_count_buffer(size)

    def write(f, flagged, rank):
        with T.If(flagged):
            with T.Then():
                store(f, rank)

    _count_tiles(flag, size, tile_counts)
    _scan_tiles(tile_counts, ceildiv(size, i64(_TILE)), count)
    _for_each_element(flag, size, tile_counts, write)


def _tile_count_buffer(size):
    return T.buffer_proxy(T.alloc_buffer((tirx.max(ceildiv(size, i64(_TILE)), i64(1)),), "int64",
                                         scope="global"))


# --------------------------------------------------------------------------- nonzero
def nonzero(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """ONNX NonZero: ``(data, out, count)``; out int64 ``[ndim, upper]`` with
    ``upper >= numel``, count int64 ``[1]``; the exact ``[ndim, count]``
    result is the first ``ndim * count`` elements of ``out``, as the CPU
    form. A parallel compaction in three launches (count per tile, scan of
    the tiles' counts, which writes ``count``, then each nonzero's
    coordinates at its rank)."""
    shape = sizes("n", ndim)
    numel = math.prod(shape) if ndim else i64(1)
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        data, out, count = nonzero_params(shape, upper, dtype)
        with T.Assert(upper >= numel, "nonzero: out is smaller than data"):
            flat = flat_view(data, numel, dtype)
            out_flat = flat_view(out, ndim * upper, "int64")

            def store(f, rank):
                total = T.bind(count[0])
                for r, i in enumerate(unravel(f, shape)):
                    out_flat[r * total + rank] = i

            _compact(lambda f: is_nonzero(flat[f], dtype), numel, count, store)
    return ib.get()


def nonzero_1d(dtype: str = "float32") -> tirx.PrimFunc:
    """The CPU form's ``(x[n], out[1, n], count[])`` (hand-built programs'
    convention) as ``nonzero``'s parallel compaction."""
    n = tirx.Var("n", "int64")
    with IRBuilder() as ib, T.prim_func():
        T.func_name("func")
        x = arg("x", [n], dtype)
        out = arg("out", [1, n], "int64")
        count = flat_view(arg("count", [], "int64"), 1, "int64")

        def store(f, rank):
            out[0, rank] = f

        _compact(lambda f: is_nonzero(x[f], dtype), n, count, store)
    return ib.get()


def nonzero_of_compare(compare: str, threshold: float, column: int, dtype: str = "float32") -> tirx.PrimFunc:
    """The CPU form's ``nonzero(compare(x, threshold))`` as ``nonzero``'s
    parallel compaction."""
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        (data, out, count), n, flag = compare_params(compare, threshold, column, dtype, upper)
        with T.Assert(upper >= n, "nonzero: out is smaller than data"):
            out_flat = flat_view(out, upper, "int64")

            def store(f, rank):
                out_flat[rank] = f

            _compact(flag, n, count, store)
    return ib.get()


# --------------------------------------------------------------------------- unique
def _device_sort(before, swap, size) -> None:
    """Sorts positions ``0 .. size - 1`` with a bitonic network, one launch
    per step (a launch is the barrier between steps), one work item per
    comparator whose first position is inside ``size``. (The number of
    steps is set by host loops over every possible span, those past
    ``size`` skipped: host code has no thread-local scalars.)"""
    with T.serial(0, 63) as s:
        with T.If((i64(1) << s) < size):
            with T.Then():
                with T.serial(0, s + 1) as t:
                    stride_log = s - t
                    stride = i64(1) << stride_log
                    # Comparators take the first ``stride`` of every ``2 * stride`` positions.
                    comparators = (tirx.floordiv(size, 2 * stride) * stride
                                   + tirx.min(tirx.floormod(size, 2 * stride), stride))
                    with launch_per_element(comparators) as q:
                        i, j = bitonic_pair(q, s + 1, stride_log)
                        compare_exchange(before, swap, i, j, size)


def unique(dtype: str = "float32", ndim: int = 1) -> tirx.PrimFunc:
    """ONNX Unique (no axis, ``sorted=1``) of the flattened ``data``:
    ``(data, values, first_indices, inverse, counts, count)``, as the CPU form.

    The (value, index) pairs are sorted (a bitonic network over the device,
    one launch per step); an element starts a run when its value differs
    from the one before it. A compaction of the run starts gives each run
    its rank: ``values`` and ``first_indices`` (the lowest index: pairs sort
    by index among equal values) at the rank, the rank to ``inverse`` of
    every element of the run, and ``counts`` from the next run's start.
    Numeric dtypes; NaNs are not supported.
    """
    shape = sizes("n", ndim)
    numel = math.prod(shape) if ndim else i64(1)
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        data, values, first, inverse, counts, count = unique_params(shape, numel, upper, dtype)
        with T.Assert(upper >= numel, "unique: output buffers are smaller than data"):
            flat = flat_view(data, numel, dtype)
            scratch = tirx.max(numel, i64(1))
            keys = T.buffer_proxy(T.alloc_buffer((scratch,), dtype, scope="global"))
            ids = T.buffer_proxy(T.alloc_buffer((scratch,), "int64", scope="global"))
            starts = T.buffer_proxy(T.alloc_buffer((scratch,), "int64", scope="global"))
            tile_counts = _tile_count_buffer(numel)
            with launch_per_element(numel) as i:
                keys[i] = flat[i]
                ids[i] = i

            def before(p, q):
                return tirx.Or(keys[p] < keys[q], tirx.And(keys[p] == keys[q], ids[p] < ids[q]))

            swap = pair_swap(keys, ids)

            _device_sort(before, swap, numel)

            def starts_run(i):
                return tirx.if_then_else(i == 0, tirx.const(True), keys[i] != keys[i - 1])

            def write(i, starts_here, runs_before):
                with T.If(starts_here):
                    with T.Then():
                        values[runs_before] = keys[i]
                        first[runs_before] = ids[i]
                        starts[runs_before] = i
                inverse[ids[i]] = runs_before + tirx.Cast("int64", starts_here) - 1

            _count_tiles(starts_run, numel, tile_counts)
            _scan_tiles(tile_counts, ceildiv(numel, i64(_TILE)), count)
            _for_each_element(starts_run, numel, tile_counts, write)
            with launch_per_element(numel) as u:
                runs = T.bind(count[0])
                with T.If(u < runs):
                    with T.Then():
                        end = tirx.if_then_else(u + 1 < runs, starts[u + 1], numel)
                        counts[u] = end - starts[u]
    return ib.get()


def unique_slices(dtype: str = "float32", is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX Unique along an axis, on ``rows`` slices of ``width`` elements:
    ``(data, values, first_indices, inverse, counts, count)``, as the CPU
    form, with the same results. Slices are compared whole, pair by pair,
    a work item per slice (``rows**2 * width`` work in all, spread over
    ``rows`` work items):

    1. each slice finds the first slice equal to it (its representative);
    2. the representatives are counted (a compaction), which with
       ``is_sorted=False`` also ranks them by first occurrence; with
       ``is_sorted=True`` each representative's rank is the number of
       representatives before it in lexicographic order;
    3. each representative writes its slice, index and number of copies at
       its rank, and each slice then reads its representative's rank as
       its ``inverse``.
    NaNs are not supported (as in the CPU form)."""
    rows, width = tirx.Var("rows", "int64"), tirx.Var("width", "int64")
    with IRBuilder() as ib, T.prim_func():
        data, values, first, inverse, counts, count = unique_slices_params(rows, width, dtype)
        scratch = tirx.max(rows, i64(1))
        representative = T.buffer_proxy(T.alloc_buffer((scratch,), "int64", scope="global"))
        rank_of = T.buffer_proxy(T.alloc_buffer((scratch,), "int64", scope="global"))
        tile_counts = _tile_count_buffer(rows)
        with launch_per_element(rows) as i:
            found = local("int64", -1)
            with T.serial(0, i + 1) as j:
                with T.If(tirx.And(found[0] < 0, compare_rows(data, j, data, i, width)[0] == 0)):
                    with T.Then():
                        found[0] = j
            representative[i] = found[0]

        def represents(i):
            return representative[i] == i

        def write(i, rank):
            copies = local("int64", 0)
            with T.serial(i, rows) as k:
                with T.If(representative[k] == i):
                    with T.Then():
                        copies[0] = copies[0] + 1
            with T.serial(0, width) as c:
                values[rank, c] = data[i, c]
            first[rank] = i
            counts[rank] = copies[0]
            rank_of[i] = rank

        _count_tiles(represents, rows, tile_counts)
        _scan_tiles(tile_counts, ceildiv(rows, i64(_TILE)), count)
        if is_sorted:
            with launch_per_element(rows) as i:
                with T.If(represents(i)):
                    with T.Then():
                        before = local("int64", 0)
                        with T.serial(0, rows) as j:
                            with T.If(represents(j)):
                                with T.Then():
                                    with T.If(compare_rows(data, j, data, i, width)[0] < 0):
                                        with T.Then():
                                            before[0] = before[0] + 1
                        write(i, before[0])
        else:
            def write_flagged(i, flagged, rank):
                with T.If(flagged):
                    with T.Then():
                        write(i, rank)

            _for_each_element(represents, rows, tile_counts, write_flagged)
        with launch_per_element(rows) as i:
            inverse[i] = rank_of[representative[i]]
    return ib.get()
