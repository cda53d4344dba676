"""Kernels whose output size depends on the input values.

Each writes its result compactly at the front of upper-bound output buffers
and the number of results to ``count`` (int64 ``[1]``): the VM reads back only
that count and views the front of the buffers. Upper-bound sizes are free
symbolic variables checked against what the kernel may write (an assertion
fails rather than write out of bounds). The loops are serial TIR, correct on
any target; data-parallel GPU versions can replace them later.
"""
from __future__ import annotations

import math

from tvm import tirx
from tvm.script import tirx as TS
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from . import heap
from .tir_builder import arg, flat_view, i64, local, loops, sizes


# --------------------------------------------------------------------------- nonzero
def nonzero_params(shape, upper, dtype: str) -> tuple:
    """Names the nonzero kernel being built and declares its parameters (the
    GPU form's are the same): ``(data, out, count)``."""
    T.func_name("nonzero")
    return arg("data", shape, dtype), arg("out", [len(shape), upper], "int64"), arg("count", [1], "int64")


def is_nonzero(value, dtype: str):
    # A bool tested with != becomes an LLVM fcmp on i1 (invalid IR).
    return value if dtype == "bool" else value != tirx.const(0, dtype)


def nonzero(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """ONNX NonZero: ``(data, out, count)``; out int64 ``[ndim, upper]`` with
    ``upper >= numel``, count int64 ``[1]``.

    Row ``r``, column ``j`` of the exact result (``[ndim, count]``, indices in
    row-major order) goes to flat position ``r * count + j`` of ``out``, so the
    first ``ndim * count`` elements of ``out`` are the exact result. Two
    passes: count, then write.
    """
    shape = sizes("n", ndim)
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        data, out, count = nonzero_params(shape, upper, dtype)
        with T.Assert(upper >= math.prod(shape), "nonzero: out is smaller than data"):
            flat = flat_view(out, ndim * upper, "int64")
            total = local("int64", 0)
            with loops(shape) as idx:
                with T.If(is_nonzero(data[tuple(idx)], dtype)):
                    with T.Then():
                        total[0] = total[0] + 1
            count[0] = total[0]
            j = local("int64", 0)
            with loops(shape) as idx:
                with T.If(is_nonzero(data[tuple(idx)], dtype)):
                    with T.Then():
                        for r, i in enumerate(idx):
                            flat[r * total[0] + j[0]] = i
                        j[0] = j[0] + 1
    return ib.get()


# Comparisons ``nonzero_of_compare`` tests elements with.
COMPARISONS = {"greater": lambda a, b: a > b, "greater_equal": lambda a, b: a >= b,
               "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b,
               "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b}


def compare_params(compare: str, threshold: float, column: int, dtype: str, upper) -> tuple:
    """Names the kernel being built and declares its parameters (the GPU
    form's are the same): ``(data, out, count)``, data ``[n]`` or, with a
    column, ``[n, m]``; and the flag of element ``i``."""
    n = tirx.Var("n", "int64")
    T.func_name("nonzero_of_compare")
    shape = [n] if column < 0 else [n, tirx.Var("m", "int64")]
    data = arg("data", shape, dtype)
    params = (data, arg("out", [1, upper], "int64"), arg("count", [1], "int64"))
    bound = tirx.const(threshold, dtype)

    def flag(i):
        return COMPARISONS[compare](data[i] if column < 0 else data[i, column], bound)

    return params, n, flag


def nonzero_of_compare(compare: str, threshold: float, column: int, dtype: str = "float32") -> tirx.PrimFunc:
    """``nonzero(compare(x, threshold))`` of a 1-D ``x`` (``column`` < 0) or
    of column ``column`` of a 2-D ``x``: ``(data, out, count)`` as
    ``nonzero``'s, the comparison made where the element is read."""
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        (data, out, count), n, flag = compare_params(compare, threshold, column, dtype, upper)
        with T.Assert(upper >= n, "nonzero: out is smaller than data"):
            flat = flat_view(out, upper, "int64")
            total = local("int64", 0)
            with T.serial(0, n) as i:
                with T.If(flag(i)):
                    with T.Then():
                        total[0] = total[0] + 1
            count[0] = total[0]
            j = local("int64", 0)
            with T.serial(0, n) as i:
                with T.If(flag(i)):
                    with T.Then():
                        flat[j[0]] = i
                        j[0] = j[0] + 1
    return ib.get()


# --------------------------------------------------------------------------- unique
def unique_params(shape, numel, upper, dtype: str) -> tuple:
    """Names the unique kernel being built and declares its parameters (the
    GPU form's are the same): ``(data, values, first_indices, inverse,
    counts, count)``."""
    T.func_name("unique")
    return (arg("data", shape, dtype), arg("values", [upper], dtype), arg("first_indices", [upper], "int64"),
            arg("inverse", [numel], "int64"), arg("counts", [upper], "int64"), arg("count", [1], "int64"))


def _lower_bound(sorted_buf, size, value):
    """First position in ``sorted_buf[0:size]`` whose element is not below
    ``value`` (a binary search); returns a local scalar buffer."""
    lo = local("int64", 0)
    hi = local("int64", size)
    with T.While(lo[0] < hi[0]):
        mid = lo[0] + ((hi[0] - lo[0]) >> 1)
        with T.If(sorted_buf[mid] < value):
            with T.Then():
                lo[0] = mid + 1
            with T.Else():
                hi[0] = mid
    return lo


def unique(dtype: str = "float32", ndim: int = 1) -> tirx.PrimFunc:
    """ONNX Unique (no axis, ``sorted=1``) of the flattened ``data``:
    ``(data, values, first_indices, inverse, counts, count)``.

    ``values`` (ascending), ``first_indices`` (index of the first occurrence)
    and ``counts`` are upper-bound buffers of length ``upper >= numel`` written
    at the front; ``inverse`` has length numel; count int64 ``[1]``.
    Sorted insertion (binary search, then a shift): O(n log u + n * u) for n
    elements and u unique values, serial. Numeric dtypes; NaNs are not supported.
    """
    shape = sizes("n", ndim)
    numel = math.prod(shape) if ndim else i64(1)
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        data, values, first, inverse, counts, count = unique_params(shape, numel, upper, dtype)
        with T.Assert(upper >= numel, "unique: output buffers are smaller than data"):
            flat = flat_view(data, numel, dtype)
            total = local("int64", 0)
            with T.serial(0, numel) as i:
                v = flat[i]
                pos = _lower_bound(values, total[0], v)
                p = pos[0]
                seen = local("bool", tirx.const(False))
                with T.If(p < total[0]):
                    with T.Then():
                        seen[0] = values[p] == v
                with T.If(seen[0]):
                    with T.Then():
                        counts[p] = counts[p] + 1
                    with T.Else():
                        with T.serial(0, total[0] - p) as t:
                            s = total[0] - 1 - t
                            values[s + 1] = values[s]
                            first[s + 1] = first[s]
                            counts[s + 1] = counts[s]
                        values[p] = v
                        first[p] = i
                        counts[p] = i64(1)
                        total[0] = total[0] + 1
            count[0] = total[0]
            with T.serial(0, numel) as i:
                inverse[i] = _lower_bound(values, total[0], flat[i])[0]
    return ib.get()


def unique_slices_params(rows, width, dtype: str) -> tuple:
    """Names the unique-slices kernel being built and declares its
    parameters (the GPU form's are the same): ``(data, values,
    first_indices, inverse, counts, count)``."""
    T.func_name("unique_slices")
    return (arg("data", [rows, width], dtype), arg("values", [rows, width], dtype),
            arg("first_indices", [rows], "int64"), arg("inverse", [rows], "int64"),
            arg("counts", [rows], "int64"), arg("count", [1], "int64"))


def compare_rows(a, a_row, b, b_row, width):
    """-1, 0 or 1 as row ``a_row`` of 2-d ``a`` comes before, equals or comes
    after row ``b_row`` of ``b`` in lexicographic order; a local scalar."""
    order = local("int64", 0)
    with T.serial(0, width) as j:
        with T.If(order[0] == 0):
            with T.Then():
                x, y = a[a_row, j], b[b_row, j]
                order[0] = tirx.Select(x < y, i64(-1), tirx.Select(y < x, i64(1), i64(0)))
    return order


def unique_slices(dtype: str = "float32", is_sorted: bool = True) -> tirx.PrimFunc:
    """ONNX Unique along an axis, on the input viewed as ``rows`` slices of
    ``width`` elements (the axis moved first, the rest flattened):
    ``(data[rows, width], values[rows, width], first_indices[rows],
    inverse[rows], counts[rows], count[1])``; the unique slices are written
    at the front of ``values``, ``count`` of them.

    Slices are kept in lexicographic order (insertion by binary search, then
    a shift); with ``is_sorted=False`` they are then put in the order of their
    first occurrence, as ONNX's ``sorted=0`` asks. Serial. NaNs are not supported.
    """
    rows, width = tirx.Var("rows", "int64"), tirx.Var("width", "int64")
    with IRBuilder() as ib, T.prim_func():
        data, values, first, inverse, counts, count = unique_slices_params(rows, width, dtype)
        total = local("int64", 0)

        def find(row):
            """The first kept slice not before data row ``row`` (binary search)."""
            lo, hi = local("int64", 0), local("int64", total[0])
            with T.While(lo[0] < hi[0]):
                mid = lo[0] + ((hi[0] - lo[0]) >> 1)
                with T.If(compare_rows(values, mid, data, row, width)[0] < 0):
                    with T.Then():
                        lo[0] = mid + 1
                    with T.Else():
                        hi[0] = mid
            return lo

        def move(src, dst):
            with T.serial(0, width) as j:
                values[dst, j] = values[src, j]
            first[dst] = first[src]
            counts[dst] = counts[src]

        with T.serial(0, rows) as i:
            p = find(i)[0]
            seen = local("bool", tirx.const(False))
            with T.If(p < total[0]):
                with T.Then():
                    seen[0] = compare_rows(values, p, data, i, width)[0] == 0
            with T.If(seen[0]):
                with T.Then():
                    counts[p] = counts[p] + 1
                with T.Else():
                    with T.serial(0, total[0] - p) as t:
                        move(total[0] - 1 - t, total[0] - t)
                    with T.serial(0, width) as j:
                        values[p, j] = data[i, j]
                    first[p] = i
                    counts[p] = i64(1)
                    total[0] = total[0] + 1
        count[0] = total[0]
        with T.serial(0, rows) as i:
            inverse[i] = find(i)[0]
        if not is_sorted:
            # First occurrences in increasing order: an insertion sort on
            # first_indices (u slices, u^2 / 2 moves at most), the inverse
            # renumbered through where each slice went.
            rank = T.buffer_proxy(T.alloc_buffer((tirx.max(rows, i64(1)),), "int64", scope="global"))
            with T.serial(0, total[0]) as u:
                ahead = local("int64", 0)
                with T.serial(0, total[0]) as v:
                    with T.If(first[v] < first[u]):
                        with T.Then():
                            ahead[0] = ahead[0] + 1
                rank[u] = ahead[0]
            with T.serial(0, rows) as i:
                inverse[i] = rank[inverse[i]]
            with T.serial(0, total[0]) as u:
                # Cycle sort by rank: each slice moves straight to its place.
                with T.While(rank[u] != u):
                    target = T.bind(rank[u])
                    with T.serial(0, width) as j:
                        held = T.bind(values[target, j])
                        values[target, j] = values[u, j]
                        values[u, j] = held
                    held_first, held_count = T.bind(first[target]), T.bind(counts[target])
                    first[target] = first[u]
                    counts[target] = counts[u]
                    first[u] = held_first
                    counts[u] = held_count
                    displaced = T.bind(rank[target])
                    rank[target] = target
                    rank[u] = displaced
    return ib.get()


# --------------------------------------------------------------------------- NMS
def nms_params(batches, boxes, classes, upper) -> tuple:
    """Names the NMS kernel being built and declares its parameters (the GPU
    form's are the same): ``(boxes, scores, max_output_boxes_per_class,
    iou_threshold, score_threshold, selected, count)``."""
    T.func_name("non_max_suppression")
    return (arg("boxes", [batches, boxes, 4], "float32"), arg("scores", [batches, classes, boxes], "float32"),
            arg("max_output_boxes_per_class", [1], "int64"), arg("iou_threshold", [1], "float32"),
            arg("score_threshold", [1], "float32"), arg("selected", [upper, 3], "int64"), arg("count", [1], "int64"))


def box_extents(box, center_point_box: int):
    """``(x0, x1, y0, y1, area)`` of a box (4 loads), with onnxruntime's
    float32 operations (``SuppressByIOU``) so that decisions match bit for bit."""
    box = [T.bind(x) for x in box]
    if center_point_box:  # [x_center, y_center, width, height]
        def extent(c, size):
            half = T.bind(box[size] / tirx.const(2.0, "float32"))
            return T.bind(box[c] - half), T.bind(box[c] + half)

        (x0, x1), (y0, y1) = extent(0, 2), extent(1, 3)
    else:  # [y1, x1, y2, x2], corners in either order
        def extent(lo, hi):
            return T.bind(tirx.min(box[lo], box[hi])), T.bind(tirx.max(box[lo], box[hi]))

        (x0, x1), (y0, y1) = extent(1, 3), extent(0, 2)
    return x0, x1, y0, y1, T.bind((x1 - x0) * (y1 - y0))


def suppress_if_overlapping(a, b, iou_threshold, suppressed) -> None:
    """Sets ``suppressed[0]`` when the IoU of extents ``a`` (a kept box) and
    ``b`` is above the threshold. Tests run in turn, most pairs failing the
    first: TIR's ``And`` would evaluate every side."""
    ax0, ax1, ay0, ay1, area_a = a
    bx0, bx1, by0, by1, area_b = b
    fzero = tirx.const(0.0, "float32")
    ix0, ix1 = tirx.max(ax0, bx0), tirx.min(ax1, bx1)
    with T.If(ix1 > ix0):
        with T.Then():
            iy0, iy1 = T.bind(tirx.max(ay0, by0)), T.bind(tirx.min(ay1, by1))
            with T.If(iy1 > iy0):
                with T.Then():
                    inter = T.bind((ix1 - ix0) * (iy1 - iy0))
                    union = T.bind(area_a + area_b - inter)
                    with T.If(tirx.all(inter > fzero, area_a > fzero, area_b > fzero, union > fzero,
                                       inter / union > iou_threshold)):
                        with T.Then():
                            suppressed[0] = tirx.const(True)


class _Grid:
    """Cells along x for a class's candidates: ``count`` cells from ``low``,
    each ``size`` wide and at least ``width`` (the widest candidate), all in
    one cell when an extent is not finite."""

    def __init__(self, low, width, size, count, one):
        self.low, self.width, self.size, self.count, self.one = low, width, size, count, one

    def cell(self, x):
        """The cell of x (float64), clamped to the grid."""
        where = tirx.max(tirx.min((x - self.low) / self.size, tirx.Cast("float64", self.count - 1)),
                         tirx.const(0.0, "float64"))
        return tirx.Select(self.one, i64(0), tirx.Cast("int64", tirx.floor(where)))


def _cells(boxes, b, order, candidates, center_point_box) -> _Grid:
    """The grid of the ``candidates`` (their boxes' indices in ``order``):
    as many cells as candidates at most."""
    inf = tirx.const(float("inf"), "float64")
    low, high, width = local("float64", inf), local("float64", -inf), local("float64", tirx.const(0.0, "float64"))
    finite = local("bool", tirx.const(True))
    with T.serial(0, candidates) as i:
        x0, x1 = box_extents([boxes[b, order[i], q] for q in range(4)], center_point_box)[:2]
        a, z = T.bind(tirx.Cast("float64", x0)), T.bind(tirx.Cast("float64", x1))
        with T.If(tirx.And(a == a, z == z)):
            with T.Then():
                with T.If(tirx.Or(tirx.isinf(a), tirx.isinf(z))):
                    with T.Then():
                        finite[0] = tirx.const(False)
                low[0] = tirx.min(low[0], a)
                high[0] = tirx.max(high[0], z)
                width[0] = tirx.max(width[0], z - a)
    count = T.bind(tirx.max(candidates, i64(1)))
    size = T.bind(tirx.max(width[0], (high[0] - low[0]) / tirx.Cast("float64", count)))
    one = T.bind(tirx.Or(tirx.Not(finite[0]), tirx.Not(size > tirx.const(0.0, "float64"))))
    return _Grid(low[0], width[0], tirx.Select(one, tirx.const(1.0, "float64"), size), count, one)


def non_max_suppression(center_point_box: int = 0) -> tirx.PrimFunc:
    """ONNX NonMaxSuppression: ``(boxes, scores, max_output_boxes_per_class,
    iou_threshold, score_threshold, selected, count)``.

    boxes float32 ``[B, N, 4]``, scores float32 ``[B, C, N]``, the three limits
    ``[1]`` tensors (int64, float32, float32); selected int64 ``[upper, 3]``
    gets rows ``[batch, class, box]`` by batch, class, then descending score
    (ties: lower box index), as onnxruntime orders them; count int64 ``[1]``.
    A box is a candidate when its score is strictly above the threshold and
    is suppressed when its IoU with a kept box is strictly above
    ``iou_threshold``. Per class, the candidates' indices are gathered into an
    N-long scratch buffer and heap-sorted by score, then visited in order.
    A class's candidates' x extents set a grid of cells along x, each at
    least as wide as the widest candidate; each kept box is listed in the
    cell of its left edge ``x0``. A candidate is compared only with the kept
    boxes of the cells from its ``x0`` minus that width to its ``x1`` (one
    cell more each side, for rounding) until one suppresses it: a box in
    another cell cannot overlap it along x, so the result is the same as
    comparing with every kept box. torchvision's batched NMS, which offsets
    each class's boxes apart, compares each candidate with its own class's
    boxes. A box whose x extent is NaN can suppress nothing and is not
    listed; with a non-finite extent among the candidates, one cell holds
    all. O(N log N + N * (kept boxes in the nearby cells)).
    Selection stops when ``upper`` rows are written.
    """
    b_, n_, c_ = sizes("d", 3)  # batches, boxes, classes
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        boxes, scores, max_out, iou_thr, score_thr, selected, count = nms_params(b_, n_, c_, upper)
        # (At least one element: a zero-byte workspace request may come back null.)
        order = T.buffer_proxy(T.alloc_buffer((tirx.max(n_, i64(1)),), "int64", scope="global"))
        # The extents of the boxes a class keeps, in order, listed by cell: read by the candidates near them.
        kept_extents = T.buffer_proxy(T.alloc_buffer((tirx.max(n_, i64(1)), 5), "float32", scope="global"))
        first_in_cell = T.buffer_proxy(T.alloc_buffer((tirx.max(n_, i64(1)),), "int64", scope="global"))
        next_in_cell = T.buffer_proxy(T.alloc_buffer((tirx.max(n_, i64(1)),), "int64", scope="global"))
        limit, iou_threshold, threshold = max_out[0], iou_thr[0], score_thr[0]
        total = local("int64", 0)
        with loops([b_, c_]) as (b, c):
            candidates = local("int64", 0)
            with T.serial(0, n_) as i:
                with T.If(scores[b, c, i] > threshold):
                    with T.Then():
                        order[candidates[0]] = i
                        candidates[0] = candidates[0] + 1

            def before(p, q):
                """Candidate at position p is visited before the one at q."""
                sp, sq = scores[b, c, order[p]], scores[b, c, order[q]]
                return tirx.Or(sp > sq, tirx.And(sp == sq, order[p] < order[q]))

            def swap(p, q):
                held = T.bind(order[p])
                order[p] = order[q]
                order[q] = held

            heap.heap_sort(before, swap, candidates[0])
            kept = local("int64", 0)
            grid = _cells(boxes, b, order, candidates[0], center_point_box)
            with T.serial(0, tirx.max(candidates[0], i64(1))) as cell:
                first_in_cell[cell] = i64(-1)
            next_candidate = local("int64", 0)
            with T.While(tirx.all(next_candidate[0] < candidates[0], kept[0] < limit, total[0] < upper)):
                box = T.bind(order[next_candidate[0]])
                next_candidate[0] = next_candidate[0] + 1
                extents = box_extents([boxes[b, box, q] for q in range(4)], center_point_box)
                x0, x1 = extents[0], extents[1]
                listed = T.bind(tirx.And(x0 == x0, x1 == x1))  # (not NaN: a NaN box neither suppresses nor is)
                suppressed = local("bool", tirx.const(False))
                with T.If(listed):
                    with T.Then():
                        last = T.bind(grid.cell(tirx.Cast("float64", x1)) + 1)
                        cell = local("int64", tirx.max(grid.cell(tirx.Cast("float64", x0) - grid.width) - 1, i64(0)))
                        with T.While(tirx.And(tirx.Not(suppressed[0]), cell[0] <= tirx.min(last, grid.count - 1))):
                            t = local("int64", first_in_cell[cell[0]])
                            with T.While(tirx.And(tirx.Not(suppressed[0]), t[0] >= 0)):
                                suppress_if_overlapping([kept_extents[t[0], q] for q in range(5)], extents,
                                                         iou_threshold, suppressed)
                                t[0] = next_in_cell[t[0]]
                            cell[0] = cell[0] + 1
                with T.If(tirx.Not(suppressed[0])):
                    with T.Then():
                        selected[total[0], 0] = b
                        selected[total[0], 1] = c
                        selected[total[0], 2] = box
                        total[0] = total[0] + 1
                        with T.If(listed):
                            with T.Then():
                                for q in range(5):
                                    kept_extents[kept[0], q] = extents[q]
                                home = T.bind(grid.cell(tirx.Cast("float64", x0)))
                                next_in_cell[kept[0]] = first_in_cell[home]
                                first_in_cell[home] = kept[0]
                        kept[0] = kept[0] + 1
        count[0] = total[0]
    return ib.get()


def nonzero_1d(dtype: str = "float32") -> tirx.PrimFunc:
    """Indices of the non-zero elements of a 1-D ``x`` written, compacted, to
    the front of ``out`` (int64 [1, n], an upper bound) and their number to
    ``count`` (int64 scalar): the count-sized kernel convention."""

    @TS.prim_func
    def func(x_handle: TS.handle, out_handle: TS.handle, count_handle: TS.handle):
        n = TS.int64()
        x = TS.match_buffer(x_handle, (n,), dtype)
        out = TS.match_buffer(out_handle, (1, n), "int64")
        count = TS.match_buffer(count_handle, (), "int64")
        count[()] = TS.int64(0)
        for i in range(n):
            if x[i] != TS.Cast(dtype, 0):
                out[0, count[()]] = i
                count[()] = count[()] + TS.int64(1)

    return func
