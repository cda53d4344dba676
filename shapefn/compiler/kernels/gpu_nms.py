"""The GPU form of ONNX NonMaxSuppression (``count.non_max_suppression``'s
signature, rows and order, bit for bit): candidates placed by score over
the whole GPU, overlap masks in tiles through shared memory, and a greedy
pass 32 candidates at a time (``non_max_suppression``'s docstring). Like the
other count-sized kernels (``gpu_count``) it writes its rows at the front of
an upper-bound output and their number to ``count``, from the device."""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .count import box_extents, nms_params, suppress_if_overlapping
from .gpu_builder import (
    THREADS,
    ceildiv,
    group_barrier,
    group_exclusive_scan,
    group_scan_array,
    launch,
    shared_barrier,
    strided,
    unravel,
)
from .tir_builder import i64, local, sizes

# Candidates per word of an overlap mask.
_WORD = 32
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
