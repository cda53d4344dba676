"""A schedule for CPU kernels that multiply matrices.

Legalized, ``matmul`` is one block over (rows, columns, k) with k innermost:
each output element walks a column of the weight, a stride of a whole row
per step, and the kernel runs at well under a GFLOP/s (Faster R-CNN's box
head: 18 s of its 20 s). Here such a block becomes: rows in tiles of
``_ROWS``, parallel over tiles; columns in vectors of up to 64 lanes,
innermost; k between them. Each output element still sums its products in
k order, so results are bit for bit those of the unscheduled kernel.

Only a PrimFunc with exactly one block, whose iterators are spatial then
one reduction (``S...SR``) over a static column extent, is scheduled; every
other kernel is returned unchanged.
"""
from __future__ import annotations

from tvm import s_tir, tirx

# Part of every CPU kernel's cache key: a change here recompiles them.
VERSION = "matmul-1"
_ROWS = 4
_LANES = (64, 32, 16, 8)


def schedule(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` scheduled for the CPU, or ``func`` itself if no rule applies."""
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(func) else []
    if len(blocks) != 1:
        return func
    block = blocks[0]
    iter_vars = sch.get(block).iter_vars
    kinds = [iv.iter_type for iv in iter_vars]
    spatial, reduce = tirx.IterVar.DataPar, tirx.IterVar.CommReduce
    if len(kinds) < 3 or kinds[-1] != reduce or any(k != spatial for k in kinds[:-1]):
        return func
    loops = sch.get_loops(block)
    if len(loops) != len(kinds):
        return func
    columns = sch.get(loops[-2]).extent
    lanes = next((v for v in _LANES if isinstance(columns, tirx.IntImm) and columns.value % v == 0), None)
    if lanes is None:
        return func
    *outer, rows, cols, k = loops
    row_tile, row = sch.split(rows, [None, _ROWS])
    col_tile, col = sch.split(cols, [None, lanes])
    sch.reorder(*outer, row_tile, col_tile, k, row, col)
    sch.vectorize(col)
    sch.parallel(sch.fuse(*outer, row_tile) if outer else row_tile)
    sch.decompose_reduction(block, k)  # (last: a vectorized loop over a split-off init is refused)
    return sch.mod["main"]


def _has_root(func: tirx.PrimFunc) -> bool:
    return isinstance(func.body, s_tir.SBlockRealize)
