"""GPU forms of the count-sized kernels (``count``): nonzero,
unique and NMS, with the CPU forms' signatures and results.

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
    box_extents,
    compare_params,
    compare_rows,
    is_nonzero,
    nms_params,
    nonzero_params,
    suppress_if_overlapping,
    unique_params,
    unique_slices_params,
)
from .gpu_builder import (
    THREADS,
    bitonic_pair,
    ceildiv,
    compare_exchange,
    group_barrier,
    group_exclusive_scan,
    group_scan_array,
    launch,
    launch_per_element,
    pair_swap,
    shared_barrier,
    strided,
    unravel,
)
from .tir_builder import arg, flat_view, i64, local, sizes

# Candidates per word of an NMS overlap mask.
_WORD = 32
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


# --------------------------------------------------------------------------- NMS
# The overlap launch's work group: _ROWS candidates (one mask word's worth)
# against _ROW_WORDS words of later candidates, a work item per (row, word).
_ROWS = _WORD
_ROW_WORDS = THREADS // _ROWS
_COLUMNS = _ROW_WORDS * _WORD  # = THREADS: each work item loads one column


def _column_slot(column):
    """Where column ``column``'s extent sits in shared memory: one pad per
    word, so that the row's eight work items reading bit b of their words
    hit eight different banks."""
    return column + tirx.floordiv(column, _WORD)


def non_max_suppression(center_point_box: int = 0) -> tirx.PrimFunc:
    """ONNX NonMaxSuppression: ``(boxes, scores, max_output_boxes_per_class,
    iou_threshold, score_threshold, selected, count)``, the CPU form's
    signature, rows, order and IoU arithmetic, by bit masks. Every step is
    spread over many work groups except the greedy pass, which is one group
    per (batch, class) settling 32 candidates at a time:

    1. one work group per (batch, class) gathers the candidates (score above
       the threshold) in box order (a prefix sum per tile of ``THREADS``);
    2. a work item per candidate finds its place in descending score, then
       box index, by counting the candidates that belong before it (tiles of
       scores in shared memory), and writes its box index and extents there;
    3. a work group per (class, 32 candidates, 8 words of later ones), the
       later ones' extents in shared memory, a work item per (candidate i,
       word w), sets bit b of ``masks[i, w]`` when candidate ``32 w + b``,
       later than i, overlaps i past the threshold: every IoU at once (words
       wholly before i's own are never read, and not written);
    4. one work group per class walks its candidates in order, 32 at a time:
       one work item settles the 32 against the suppression bits so far and
       their own masks (a candidate is kept unless a kept one suppresses it,
       as in the greedy pass), then every work item ORs the masks of the
       chunk's kept candidates into the later words. It stops after
       ``max_output_boxes_per_class`` kept.

    A fifth launch (one group) turns the kept counts into row offsets and
    writes ``count`` (at most ``upper``); a sixth copies each class's kept
    boxes to its rows. The masks take ``n * ceil(n / 32)`` words per class
    of ``n`` boxes, as device workspace.
    """
    # The CPU form's extents and IoU test (``count``), so that decisions
    # match it bit for bit.
    b_, n_, c_ = sizes("d", 3)  # batches, boxes, classes
    upper = tirx.Var("upper", "int64")
    with IRBuilder() as ib, T.prim_func():
        boxes, scores, max_out, iou_thr, score_thr, selected, count = nms_params(b_, n_, c_, upper)
        classes = b_ * c_
        entries = tirx.max(classes * n_, i64(1))
        words = ceildiv(n_, i64(_WORD))

        def scratch(shape, dtype):
            return T.buffer_proxy(T.alloc_buffer(shape, dtype, scope="global"))

        # Per (batch, class), n_ entries from g * n_: the candidates' scores
        # and box indices in box order, then their box indices and extents
        # in score order, then the kept boxes; per class its candidate and
        # kept counts; per candidate its mask words; per class the
        # suppression bits of its candidates.
        keys, ids, order = scratch((entries,), "float32"), scratch((entries,), "int64"), scratch((entries,), "int64")
        extents, kept = scratch((entries, 5), "float32"), scratch((entries,), "int64")
        per_class = tirx.max(classes, i64(1))
        candidate_counts, kept_counts = scratch((per_class,), "int64"), scratch((per_class,), "int64")
        offsets = scratch((per_class,), "int64")
        masks = scratch((tirx.max(classes * n_ * words, i64(1)),), "uint32")
        removed = scratch((tirx.max(classes * words, i64(1)),), "uint32")

        with launch(classes) as (g, thread):
            b, c = T.bind(tirx.floordiv(g, c_)), T.bind(tirx.floormod(g, c_))
            candidates = _gather_candidates(scores, b, c, n_, score_thr[0], keys, ids, g * n_, thread)
            with T.If(thread == 0):
                with T.Then():
                    candidate_counts[g] = candidates

        # (Divisors by max(., 1): TVM hoists these to the host, where a
        # count of 0 would divide by zero though nothing is launched.)
        tiles = ceildiv(n_, i64(THREADS))
        with launch(classes * tiles) as (group, thread):
            g, tile = unravel(group, [classes, tirx.max(tiles, i64(1))])
            _place_by_score(keys, ids, boxes, T.bind(tirx.floordiv(g, c_)), g * n_, tile, candidate_counts[g],
                            order, extents, center_point_box, thread)

        row_tiles, word_tiles = ceildiv(n_, i64(_ROWS)), ceildiv(words, i64(_ROW_WORDS))
        with launch(classes * row_tiles * word_tiles) as (group, thread):
            g, row_tile, word_tile = unravel(group, [classes, tirx.max(row_tiles, i64(1)),
                                                     tirx.max(word_tiles, i64(1))])
            _overlap_tile(extents, g * n_, row_tile, word_tile, words, candidate_counts[g], iou_thr[0], masks,
                          g * n_ * words, thread)

        with launch(classes) as (g, thread):
            kept_count = _select_by_masks(masks, removed, order, kept, g, n_, words, candidate_counts[g],
                                          max_out[0], thread)
            with T.If(thread == 0):
                with T.Then():
                    kept_counts[g] = kept_count

        with launch(i64(1)) as (_, thread):
            total = group_scan_array(kept_counts, offsets, classes, thread)
            with T.If(thread == 0):
                with T.Then():
                    count[0] = tirx.min(total, upper)

        with launch(classes) as (g, thread):
            with strided(kept_counts[g], thread) as t:
                row = T.bind(offsets[g] + t)
                with T.If(row < upper):  # the CPU form stops there
                    with T.Then():
                        selected[row, 0] = tirx.floordiv(g, c_)
                        selected[row, 1] = tirx.floormod(g, c_)
                        selected[row, 2] = kept[g * n_ + t]
    return ib.get()


def _gather_candidates(scores, b, c, boxes, threshold, keys, ids, base, thread):
    """Writes the (score, index) of the boxes scoring above ``threshold`` in
    class ``(b, c)`` to ``keys``/``ids`` from ``base``, in box order, one
    tile of ``THREADS`` boxes at a time; returns how many (a local, uniform)."""
    candidates = local("int64", 0)
    with T.serial(0, ceildiv(boxes, i64(THREADS))) as tile:
        i = T.bind(tile * THREADS + thread)
        is_candidate = T.bind(tirx.if_then_else(i < boxes, scores[b, c, i] > threshold, tirx.const(False)))
        before, total = group_exclusive_scan(tirx.Cast("int64", is_candidate), thread)
        with T.If(is_candidate):
            with T.Then():
                keys[base + candidates[0] + before] = scores[b, c, i]
                ids[base + candidates[0] + before] = i
        candidates[0] = candidates[0] + total
    return candidates[0]


def _place_by_score(keys, ids, boxes, b, base, tile, candidates, order, extents, center_point_box, thread):
    """Candidate ``p = tile * THREADS + thread`` of the class whose entries
    start at ``base``: its place in descending score, ties by box index
    (candidates are in box order, so by position), is the number of
    candidates that belong before it; writes its box index to ``order`` and
    its extents to ``extents`` there. The scores are read a tile at a time
    into shared memory by the whole group (the class, so the trip count, is
    the group's)."""
    tile_keys = T.buffer_proxy(T.alloc_buffer((THREADS,), "float32", scope="shared"))
    p = T.bind(tile * THREADS + thread)
    # (A group past the last candidate loops no times: a barrier may not sit
    # in a condition.)
    trips = T.bind(tirx.if_then_else(tile * THREADS < candidates, ceildiv(candidates, i64(THREADS)), i64(0)))
    mine = T.bind(tirx.if_then_else(p < candidates, keys[base + p], tirx.const(0.0, "float32")))
    place = local("int64", 0)
    with T.serial(0, trips) as t:
        first = T.bind(t * THREADS)
        with T.If(first + thread < candidates):
            with T.Then():
                tile_keys[thread] = keys[base + first + thread]
        shared_barrier()
        with T.serial(0, tirx.min(i64(THREADS), candidates - first)) as k:
            other = T.bind(tile_keys[k])
            goes_before = tirx.Or(other > mine, tirx.And(other == mine, first + k < p))
            place[0] = place[0] + tirx.Cast("int64", goes_before)
        shared_barrier()
    with T.If(p < candidates):
        with T.Then():
            box = T.bind(ids[base + p])
            order[base + place[0]] = box
            for q, x in enumerate(box_extents([boxes[b, box, q] for q in range(4)], center_point_box)):
                extents[base + place[0], q] = x


def _overlap_tile(extents, base, row_tile, word_tile, words, candidates, iou_threshold, masks, mask_base,
                  thread) -> None:
    """Sets ``masks[mask_base + i * words + w]`` for the candidates ``i`` of
    row tile ``row_tile`` (32, one word's worth) and the words ``w`` of word
    tile ``word_tile``: bit b set when candidate ``32 w + b``, later than
    ``i``, overlaps it past the threshold (the CPU form's test, ``i`` the
    kept box). The tile's 256 later candidates' extents are read once into
    shared memory. Tiles whose words all lie before the rows' own word are
    skipped: the greedy pass never reads those words."""
    columns = T.buffer_proxy(T.alloc_buffer((5 * _column_slot(_COLUMNS),), "float32", scope="shared"))
    slots = _column_slot(_COLUMNS)
    row, word_in_tile = thread // _ROW_WORDS, thread % _ROW_WORDS
    i = T.bind(row_tile * _ROWS + row)
    w = T.bind(word_tile * _ROW_WORDS + word_in_tile)
    first = T.bind(word_tile * _COLUMNS)
    active = T.bind(tirx.all(word_tile * _ROW_WORDS + _ROW_WORDS - 1 >= row_tile, row_tile * _ROWS < candidates,
                             first < candidates))  # (uniform: the group's tiles)
    with T.If(tirx.all(active, first + thread < candidates)):
        with T.Then():
            for q in range(5):
                columns[q * slots + _column_slot(thread)] = extents[base + first + thread, q]
    shared_barrier()
    with T.If(tirx.all(active, i < candidates, w < words)):
        with T.Then():
            keeper = [T.bind(extents[base + i, q]) for q in range(5)]
            bits = local("uint32", 0)
            with T.serial(0, _WORD) as bit:
                j = T.bind(w * _WORD + bit)
                with T.If(tirx.all(j > i, j < candidates)):
                    with T.Then():
                        slot = T.bind(_column_slot(word_in_tile * _WORD + bit))
                        overlapping = local("bool", tirx.const(False))
                        later = [T.bind(columns[q * slots + slot]) for q in range(5)]
                        suppress_if_overlapping(keeper, later, iou_threshold, overlapping)
                        with T.If(overlapping[0]):
                            with T.Then():
                                bits[0] = bits[0] | (tirx.const(1, "uint32") << tirx.Cast("uint32", bit))
            masks[mask_base + i * words + w] = bits[0]


def _select_by_masks(masks, removed, order, kept, g, boxes, words, candidates, limit, thread):
    """The greedy pass of class ``g`` over its sorted candidates, 32 at a
    time, from their overlap masks; returns the number kept (uniform), their
    box indices in ``kept`` from ``g * boxes``. ``removed`` holds the class's
    suppression bits (word w: the candidates kept ones suppress); the 32
    being settled, their masks and which are kept sit in shared memory."""
    chunk_masks = T.buffer_proxy(T.alloc_buffer((_WORD,), "uint32", scope="shared"))
    kept_in_chunk = T.buffer_proxy(T.alloc_buffer((_WORD,), "int32", scope="shared"))
    kept_so_far = T.buffer_proxy(T.alloc_buffer((1,), "int64", scope="shared"))
    used = T.bind(ceildiv(candidates, i64(_WORD)))  # words holding candidates
    with strided(used, thread) as w:
        removed[g * words + w] = tirx.const(0, "uint32")
    with T.If(thread == 0):
        with T.Then():
            kept_so_far[0] = i64(0)
    kept_count = local("int64", 0)
    group_barrier()
    # (Every chunk is visited, past the limit too, doing nothing: a barrier
    # may not sit in a condition.)
    with T.serial(0, used) as current:
        going = T.bind(kept_count[0] < limit)  # (uniform: read by all from shared memory)
        first = T.bind(current * _WORD)
        with T.If(thread < _WORD):
            with T.Then():
                i = T.bind(first + thread)
                chunk_masks[thread] = tirx.if_then_else(
                    tirx.all(going, i < candidates), masks[(g * boxes + i) * words + current], tirx.const(0, "uint32"))
        shared_barrier()
        with T.If(tirx.all(thread == 0, going)):  # the 32 in order, as the greedy pass visits them
            with T.Then():
                word = local("uint32", removed[g * words + current])
                settled = local("int64", kept_count[0])
                with T.serial(0, _WORD) as bit:
                    i = T.bind(first + bit)
                    suppressed = T.bind((word[0] >> tirx.Cast("uint32", bit)) & tirx.const(1, "uint32"))
                    is_kept = T.bind(tirx.all(i < candidates, settled[0] < limit,
                                              suppressed == tirx.const(0, "uint32")))
                    kept_in_chunk[bit] = tirx.Cast("int32", is_kept)
                    with T.If(is_kept):
                        with T.Then():
                            kept[g * boxes + settled[0]] = order[g * boxes + i]
                            settled[0] = settled[0] + 1
                            chunk_mask = T.bind(chunk_masks[bit])
                            word[0] = word[0] | chunk_mask
                kept_so_far[0] = settled[0]
        shared_barrier()
        kept_count[0] = kept_so_far[0]
        later = T.bind(current + 1)
        with T.If(going):
            with T.Then():
                with strided(used - later, thread) as r:  # what the chunk's kept suppress further on
                    w = T.bind(later + r)
                    bits = local("uint32", removed[g * words + w])
                    with T.serial(0, _WORD) as bit:
                        is_kept = T.bind(kept_in_chunk[bit])
                        with T.If(is_kept != 0):
                            with T.Then():
                                bits[0] = bits[0] | masks[(g * boxes + first + bit) * words + w]
                    removed[g * words + w] = bits[0]
        group_barrier()
    return kept_count[0]
