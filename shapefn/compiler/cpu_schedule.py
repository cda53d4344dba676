"""A schedule for CPU kernels that reduce: matmuls and convolutions.

Legalized, ``matmul`` is one block over (rows, columns, k) with k innermost:
each output element walks a column of the weight, a stride of a whole row
per step, and the kernel runs far below the machine's speed (Faster R-CNN's
box head spent most of its time there: docs/bench/compiler.md). Here the one reduction block of a kernel (other
blocks, such as a convolution's padding or a fused epilogue, are left as
they are) becomes: the last-but-one spatial loop in tiles of ``_ROWS``,
parallel over tiles; the last spatial loop innermost, in vectors of up to 64
lanes when its extent is static and divisible by 4 (left to LLVM otherwise);
the reduction loops between them, in their order. Each output element still
sums its products in the same order, so results are bit for bit those of the
unscheduled kernel.

Only a block whose iterators are spatial then reduction (``S..SR..R``, at
least two spatial) with at least ``_MIN_REDUCTION`` products per output (or
a reduction of runtime extent) is scheduled: a depthwise convolution's 9 per
output ran slower in tiles. Every other kernel is returned unchanged.
"""
from __future__ import annotations

import math

import tvm_ffi
from tvm import s_tir, tirx

# Part of every CPU kernel's cache key: a change here recompiles them.
VERSION = "reduction-2"
_ROWS = 4
_LANES = (64, 32, 16, 8, 4)
_MIN_REDUCTION = 32


def schedule(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` scheduled for the CPU, or ``func`` itself if no rule applies."""
    if not _reduces(func):
        return func  # most kernels: decided without building a Schedule (every compile schedules every kernel)
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(func) else []
    spatial, reduce = tirx.IterVar.DataPar, tirx.IterVar.CommReduce
    reductions = [b for b in blocks if any(iv.iter_type == reduce for iv in sch.get(b).iter_vars)]
    if len(reductions) != 1:
        return func
    block = reductions[0]
    kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
    n_spatial = kinds.index(reduce)
    if n_spatial < 2 or any(k != spatial for k in kinds[:n_spatial]) or any(k != reduce for k in kinds[n_spatial:]):
        return func
    loops = sch.get_loops(block)
    if len(loops) != len(kinds):
        return func
    extents = [sch.get(loop).extent for loop in loops[n_spatial:]]
    if all(isinstance(e, tirx.IntImm) for e in extents) and math.prod(e.value for e in extents) < _MIN_REDUCTION:
        return func  # a depthwise convolution: too little work per output for tiles to pay
    columns = sch.get(loops[n_spatial - 1]).extent
    lanes = next((v for v in _LANES if isinstance(columns, tirx.IntImm) and columns.value % v == 0), None)
    *outer, rows, cols = loops[:n_spatial]
    ks = loops[n_spatial:]
    row_tile, row = sch.split(rows, [None, _ROWS])
    if lanes is not None:
        col_tile, col = sch.split(cols, [None, lanes])
        sch.reorder(*outer, row_tile, col_tile, *ks, row, col)
        sch.vectorize(col)
    else:  # a size known only at run time: the loop order alone (LLVM may still vectorize)
        sch.reorder(*outer, row_tile, *ks, row, cols)
    sch.parallel(sch.fuse(*outer, row_tile) if outer else row_tile)
    sch.decompose_reduction(block, ks[0])  # (last: a vectorized loop over a split-off init is refused)
    return sch.mod["main"]


def _reduces(func: tirx.PrimFunc) -> bool:
    """Whether any block of ``func`` has a reduction iterator."""
    found = []

    def block(node):
        if any(iv.iter_type == tirx.IterVar.CommReduce for iv in node.iter_vars):
            found.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, block)], order="pre")
    return bool(found)


def _has_root(func: tirx.PrimFunc) -> bool:
    return isinstance(func.body, s_tir.SBlockRealize)
