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
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from shapefn.compiler.dyn_kernels import _arg, _flat_view, _i64, _local, _loops, _sizes


# --------------------------------------------------------------------------- nonzero
def nonzero(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """ONNX NonZero: ``(data, out, count)``; out int64 ``[ndim, upper]`` with
    ``upper >= numel``, count int64 ``[1]``.

    Row ``r``, column ``j`` of the exact result (``[ndim, count]``, indices in
    row-major order) goes to flat position ``r * count + j`` of ``out``, so the
    first ``ndim * count`` elements of ``out`` are the exact result. Two
    passes: count, then write.
    """
    shape = _sizes("n", ndim)
    upper = tirx.Var("upper", "int64")

    def is_nonzero(value):
        # A bool tested with != becomes an LLVM fcmp on i1 (invalid IR).
        return value if dtype == "bool" else value != tirx.const(0, dtype)

    with IRBuilder() as ib, T.prim_func():
        T.func_name("nonzero")
        data = _arg("data", shape, dtype)
        out = _arg("out", [ndim, upper], "int64")
        count = _arg("count", [1], "int64")
        with T.Assert(upper >= math.prod(shape), "nonzero: out is smaller than data"):
            flat = _flat_view(out, ndim * upper, "int64")
            total = _local("int64", 0)
            with _loops(shape) as idx:
                with T.If(is_nonzero(data[tuple(idx)])):
                    with T.Then():
                        total[0] = total[0] + 1
            count[0] = total[0]
            j = _local("int64", 0)
            with _loops(shape) as idx:
                with T.If(is_nonzero(data[tuple(idx)])):
                    with T.Then():
                        for r, i in enumerate(idx):
                            flat[r * total[0] + j[0]] = i
                        j[0] = j[0] + 1
    return ib.get()


# --------------------------------------------------------------------------- unique
def _lower_bound(sorted_buf, size, value):
    """First position in ``sorted_buf[0:size]`` whose element is not below
    ``value`` (a binary search); returns a local scalar buffer."""
    lo = _local("int64", 0)
    hi = _local("int64", size)
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
    shape = _sizes("n", ndim)
    numel = math.prod(shape) if ndim else _i64(1)
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        T.func_name("unique")
        data = _arg("data", shape, dtype)
        values = _arg("values", [upper], dtype)
        first = _arg("first_indices", [upper], "int64")
        inverse = _arg("inverse", [numel], "int64")
        counts = _arg("counts", [upper], "int64")
        count = _arg("count", [1], "int64")
        with T.Assert(upper >= numel, "unique: output buffers are smaller than data"):
            flat = _flat_view(data, numel, dtype)
            total = _local("int64", 0)
            with T.serial(0, numel) as i:
                v = flat[i]
                pos = _lower_bound(values, total[0], v)
                p = pos[0]
                seen = _local("bool", tirx.const(False))
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
                        counts[p] = _i64(1)
                        total[0] = total[0] + 1
            count[0] = total[0]
            with T.serial(0, numel) as i:
                inverse[i] = _lower_bound(values, total[0], flat[i])[0]
    return ib.get()


# --------------------------------------------------------------------------- NMS
def _suppresses(a, b, iou_threshold, center_point_box: int):
    """onnxruntime's ``SuppressByIOU`` for boxes ``a`` and ``b`` (4 loads each),
    with the same float32 operations so that decisions match bit for bit.
    Emits the intermediate values as bindings; returns the condition."""
    a, b = [T.bind(x) for x in a], [T.bind(x) for x in b]
    if center_point_box:  # [x_center, y_center, width, height]
        def extent(box, c, size):
            half = T.bind(box[size] / tirx.const(2.0, "float32"))
            return T.bind(box[c] - half), T.bind(box[c] + half)

        (ax0, ax1), (bx0, bx1) = extent(a, 0, 2), extent(b, 0, 2)
        (ay0, ay1), (by0, by1) = extent(a, 1, 3), extent(b, 1, 3)
    else:  # [y1, x1, y2, x2], corners in either order
        def extent(box, lo, hi):
            return T.bind(tirx.min(box[lo], box[hi])), T.bind(tirx.max(box[lo], box[hi]))

        (ax0, ax1), (bx0, bx1) = extent(a, 1, 3), extent(b, 1, 3)
        (ay0, ay1), (by0, by1) = extent(a, 0, 2), extent(b, 0, 2)
    ix0, ix1 = T.bind(tirx.max(ax0, bx0)), T.bind(tirx.min(ax1, bx1))
    iy0, iy1 = T.bind(tirx.max(ay0, by0)), T.bind(tirx.min(ay1, by1))
    inter = T.bind((ix1 - ix0) * (iy1 - iy0))
    area_a = T.bind((ax1 - ax0) * (ay1 - ay0))
    area_b = T.bind((bx1 - bx0) * (by1 - by0))
    union = T.bind(area_a + area_b - inter)
    fzero = tirx.const(0.0, "float32")
    return tirx.all(ix1 > ix0, iy1 > iy0, inter > fzero, area_a > fzero, area_b > fzero,
                    union > fzero, inter / union > iou_threshold)


def non_max_suppression(center_point_box: int = 0) -> tirx.PrimFunc:
    """ONNX NonMaxSuppression: ``(boxes, scores, max_output_boxes_per_class,
    iou_threshold, score_threshold, selected, count)``.

    boxes float32 ``[B, N, 4]``, scores float32 ``[B, C, N]``, the three limits
    ``[1]`` tensors (int64, float32, float32); selected int64 ``[upper, 3]``
    gets rows ``[batch, class, box]`` by batch, class, then descending score
    (ties: lower box index), as onnxruntime orders them; count int64 ``[1]``.
    A box is a candidate when its score is strictly above the threshold and
    is suppressed when its IoU with a kept box is strictly above
    ``iou_threshold``. Candidates are visited in score order without sorting:
    each step scans the class for the best one ranked after the previous
    candidate, O(N) per step and O(N^2 + N * kept) per class, no scratch.
    Selection stops when ``upper`` rows are written.
    """
    b_, n_, c_ = _sizes("d", 3)  # batches, boxes, classes
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        T.func_name("non_max_suppression")
        boxes = _arg("boxes", [b_, n_, 4], "float32")
        scores = _arg("scores", [b_, c_, n_], "float32")
        max_out = _arg("max_output_boxes_per_class", [1], "int64")
        iou_thr = _arg("iou_threshold", [1], "float32")
        score_thr = _arg("score_threshold", [1], "float32")
        selected = _arg("selected", [upper, 3], "int64")
        count = _arg("count", [1], "int64")
        limit, iou_threshold, threshold = max_out[0], iou_thr[0], score_thr[0]
        total = _local("int64", 0)
        with _loops([b_, c_]) as (b, c):
            first_row = _local("int64", total[0])
            kept = _local("int64", 0)
            prev_s = _local("float32", tirx.const(0.0, "float32"))
            prev_i = _local("int64", -1)
            more = _local("bool", tirx.const(True))
            with T.While(tirx.all(more[0], kept[0] < limit, total[0] < upper)):
                best_s = _local("float32", tirx.const(0.0, "float32"))
                best_i = _local("int64", -1)
                with T.serial(0, n_) as i:
                    s = scores[b, c, i]
                    after_prev = tirx.Or(prev_i[0] < 0, tirx.Or(
                        s < prev_s[0], tirx.And(s == prev_s[0], i > prev_i[0])))
                    # Scanning upwards, a strict > keeps the lower index on ties.
                    better = tirx.Or(best_i[0] < 0, s > best_s[0])
                    with T.If(tirx.all(s > threshold, after_prev, better)):
                        with T.Then():
                            best_s[0] = s
                            best_i[0] = i
                with T.If(best_i[0] < 0):
                    with T.Then():
                        more[0] = tirx.const(False)
                    with T.Else():
                        prev_s[0] = best_s[0]
                        prev_i[0] = best_i[0]
                        keep = _local("bool", tirx.const(True))
                        with T.serial(0, kept[0]) as t:
                            other = selected[first_row[0] + t, 2]
                            with T.If(_suppresses(
                                    [boxes[b, other, q] for q in range(4)],
                                    [boxes[b, best_i[0], q] for q in range(4)],
                                    iou_threshold, center_point_box)):
                                with T.Then():
                                    keep[0] = tirx.const(False)
                        with T.If(keep[0]):
                            with T.Then():
                                selected[total[0], 0] = b
                                selected[total[0], 1] = c
                                selected[total[0], 2] = best_i[0]
                                total[0] = total[0] + 1
                                kept[0] = kept[0] + 1
        count[0] = total[0]
    return ib.get()
