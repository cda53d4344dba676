"""Matmul by a constant matrix on the CPU (``x [N, K] @ W [K, M]``: fully
connected layers, the R-CNN box heads) as a register-tiled GEMM, the
convolution's scheme (``cpu_conv.py``) with rows for output columns:

* ``W`` is packed at compile time into ``[M / L, K, L]`` (``L`` output
  features per vector register, zero-padded);
* a tile of ``ROWS`` rows by ``cpu_conv.VECTORS`` feature vectors
  accumulates in registers over ``K``: per step 2 vector loads of ``W``,
  ``ROWS`` broadcast values of ``x`` and ``2 * ROWS`` FMAs; tiles are
  parallel over blocks of features;
* the row count, known only at run time (ROIs), is rounded up to whole
  tiles: the rows past ``N`` read ``x``'s last row and are never written
  out, so ``x`` needs no padded copy;
* ``unpack`` writes ``[N, M]`` with the operations fused after the matmul
  (bias, activation).
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from . import cpu_conv
from .tir_builder import i64

BLOCK = "dense_packed"
ROWS = 8  # rows per register tile (by cpu_conv.VECTORS feature vectors)


def pack_weight(weight: np.ndarray, lanes: int) -> np.ndarray:
    """``weight [K, M]`` as ``[ceil(M / lanes), K, lanes]``, the features past M zero."""
    k, m = weight.shape
    blocks = -(-m // lanes)
    padded = np.zeros((k, blocks * lanes), weight.dtype)
    padded[:, :m] = weight
    return np.ascontiguousarray(padded.reshape(k, blocks, lanes).transpose(1, 0, 2))


def dense_te(data: te.Tensor, packed: te.Tensor, out_features: int, out_dtype: str) -> te.Tensor:
    """``data [N, K]`` times the packed weight (``pack_weight``): ``[N, out_features]``."""
    rows, _ = data.shape
    blocks, depth, lanes = (int(d) for d in packed.shape)
    tiled_rows = (rows + (ROWS - 1)) // ROWS * ROWS
    k = te.reduce_axis((0, i64(depth)), "k")
    last = rows - 1  # (read only where rows > 0: with none there are no tiles)
    dense = te.compute(
        (tiled_rows, i64(blocks), i64(lanes)),
        lambda n, mb, ml: te.sum(data[tirx.min(n, last), k].astype(out_dtype)
                                 * packed[mb, k, ml].astype(out_dtype), axis=[k]),
        name=BLOCK, attrs={cpu_conv.ATTR: BLOCK})
    return te.compute((rows, i64(out_features)), lambda n, m: dense[n, m // lanes, m % lanes], name="unpack")


def is_packed_dense(sch: s_tir.Schedule, block) -> bool:
    return str(sch.get(block).annotations.get(cpu_conv.ATTR, "")) == BLOCK


def schedule(sch: s_tir.Schedule, block) -> None:
    """The register tiling of the module's docstring on the ``BLOCK`` block."""
    for stage in cpu_conv.unpack_with_epilogue(sch, block):
        loops = sch.get_loops(stage)
        sch.parallel(loops[0])
    n, mb, ml, k = sch.get_loops(block)
    cpu_conv.tile_in_registers(sch, block, mb, [], sch.split(n, [None, ROWS]), [k], ml)
