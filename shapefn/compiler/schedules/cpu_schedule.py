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

A convolution or matmul legalized as ``kernels/cpu_conv.py``'s or
``kernels/cpu_dense.py``'s packed kernel gets that module's register-tiled
schedule instead, and a depthwise convolution legalized as
``kernels/cpu_depthwise.py``'s kernel that module's schedule.

Only a block whose iterators are spatial then reduction (``S..SR..R``, at
least two spatial) with at least ``_MIN_REDUCTION`` products per output (or
a reduction of runtime extent) is scheduled: a grouped convolution's 9 or
18 per output ran slower in tiles. In every other kernel that reduces, each
reduction's initial value is written before its loops (``_init_first``):
TVM writes it in the first iteration, so a reduction over an empty axis left
its output unwritten.
"""
from __future__ import annotations

import logging
import math

import tvm_ffi
from tvm import s_tir, tirx

from ..kernels import cpu_conv, cpu_dense, cpu_depthwise, cpu_roi_align

# Part of every CPU kernel's cache key: a change here recompiles them.
VERSION = "reduction-3+conv2d-packed-2+dense-packed-2+depthwise-1+roi-align-1"
_ROWS = 4
_LANES = (64, 32, 16, 8, 4)
_MIN_REDUCTION = 32
_log = logging.getLogger(__name__)


def schedule(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` scheduled for the CPU, or ``func`` itself if it does not reduce."""
    if cpu_roi_align.is_roi_align(func):
        return cpu_roi_align.schedule(func)
    if not _reduces(func):
        return func  # most kernels: decided without building a Schedule (every compile schedules every kernel)
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root")) if _has_root(func) else []
    reduce = tirx.IterVar.CommReduce
    reductions = [b for b in blocks if any(iv.iter_type == reduce for iv in sch.get(b).iter_vars)]
    packed = _packed_schedule(sch, reductions[0]) if len(reductions) == 1 else None
    if packed is not None:
        name = sch.get(reductions[0]).name_hint
        try:
            packed(sch, reductions[0])
            return sch.mod["main"]
        except s_tir.ScheduleError as err:
            # (a size expression the schedule's analysis cannot follow: the
            # kernel is right without it, only slower)
            _log.warning("%s: not register-tiled: %s", name, str(err).splitlines()[0])
            sch = s_tir.Schedule(func)
            reductions = [sch.get_sblock(name)]
    if len(reductions) == 1 and _tiled(sch, reductions[0]):
        return sch.mod["main"]
    for block in reductions:
        _init_first(sch, block)
    return sch.mod["main"]


def _packed_schedule(sch: s_tir.Schedule, block):
    """The schedule of a convolution or matmul legalized as a packed kernel
    (``kernels/cpu_conv.py``, ``kernels/cpu_dense.py``) or of a depthwise
    convolution (``kernels/cpu_depthwise.py``), or None."""
    if cpu_conv.is_packed_conv(sch, block):
        return cpu_conv.schedule
    if cpu_dense.is_packed_dense(sch, block):
        return cpu_dense.schedule
    if cpu_depthwise.is_depthwise(sch, block):
        return cpu_depthwise.schedule
    return None


def _init_first(sch: s_tir.Schedule, block) -> None:
    """A reduction's initial value written before its reduction loops, not
    in their first iteration (TVM's lowering), so that a reduction over
    nothing (ReduceMax of an empty tensor) gives it rather than leaving its
    output unwritten. Blocks whose loops do not allow it stay as they are."""
    kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
    loops = sch.get_loops(block)
    n_reduce = kinds.count(tirx.IterVar.CommReduce)
    if len(loops) != len(kinds) or kinds[len(kinds) - n_reduce:] != [tirx.IterVar.CommReduce] * n_reduce:
        return  # (not a block as TE makes them: spatial loops, then one loop per reduction iterator)
    sch.decompose_reduction(block, loops[len(loops) - n_reduce])


def _tiled(sch: s_tir.Schedule, block) -> bool:
    """Tiles the reduction ``block`` as the module's docstring says; False
    (``sch`` unchanged) where the rule does not apply."""
    spatial, reduce = tirx.IterVar.DataPar, tirx.IterVar.CommReduce
    kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
    n_spatial = kinds.index(reduce)
    if n_spatial < 2 or any(k != spatial for k in kinds[:n_spatial]) or any(k != reduce for k in kinds[n_spatial:]):
        return False
    loops = sch.get_loops(block)
    if len(loops) != len(kinds):
        return False
    extents = [sch.get(loop).extent for loop in loops[n_spatial:]]
    if all(isinstance(e, tirx.IntImm) for e in extents) and math.prod(e.value for e in extents) < _MIN_REDUCTION:
        return False  # a grouped convolution: too little work per output for tiles to pay
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
    return True


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
