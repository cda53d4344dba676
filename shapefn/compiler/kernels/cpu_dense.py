"""Matmul by a constant matrix on the CPU (``x [N, K] @ W [K, M]``: fully
connected layers, the R-CNN box heads) as a register-tiled GEMM, the
convolution's scheme (``cpu_conv.py``) with rows for output columns:

* ``W`` is packed at compile time into ``[M / L, K, L]`` (``L`` output
  features per vector register, zero-padded);
* a tile of rows by feature vectors (``register_tile``: 6 x 4 with AVX-512,
  4 x 2 with 16 vector registers) accumulates in registers over ``K``: per
  step one vector load of ``W`` per vector, one broadcast value of ``x`` per
  row and a fused multiply-add per pair; tiles are parallel over groups of
  feature vectors;
* when the weights of one group of vectors are too large for the cache
  (Faster R-CNN's fc6: 12544 x 64 floats, 3.2 MB), ``K`` is walked in blocks
  of ``K_BLOCK`` (which stay in L1) over every row tile before the next
  block, the tile's sums kept in the packed result between blocks: each
  output still sums its products in order of ``k``;
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
# (feature vectors, rows) of the register tile by float32 lanes; measured
# on one AVX-512 core (fc6, fc7 of bench kernels): 4 x 6 ran 10-20% faster
# than 2 x 8, and 2 x 12 or 2 x 14 slower; built for 8 lanes (16 registers)
# 2 x 4 ran twice as fast as 2 x 8, which spills.
TILES = {16: (4, 6), 8: (2, 4), 4: (2, 4)}
K_BLOCK = 256  # at most this many k per block (a divisor of K, at least K_BLOCK / 4)
K_BLOCKED_BYTES = 1 << 20  # a tile column's weights above this are walked in K blocks


def register_tile(lanes: int) -> tuple[int, int]:
    """(feature vectors, rows) of the register tile for ``lanes`` float32 lanes."""
    return TILES[lanes]


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
    tile_rows = register_tile(lanes)[1]
    tiled_rows = (rows + (tile_rows - 1)) // tile_rows * tile_rows
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


def k_block(depth: int, column_bytes: int) -> int | None:
    """The K block for ``depth`` products whose tile column of weights takes
    ``column_bytes``, or None (not blocked: the column fits the cache, or K
    has no divisor near ``K_BLOCK``; a block that does not divide K would
    put a bound check in the innermost loop)."""
    if column_bytes <= K_BLOCKED_BYTES:
        return None
    return next((b for b in range(K_BLOCK, K_BLOCK // 4 - 1, -1) if depth % b == 0), None)


def schedule(sch: s_tir.Schedule, block) -> None:
    """The register tiling of the module's docstring on the ``BLOCK`` block."""
    for stage in cpu_conv.unpack_with_epilogue(sch, block):
        loops = sch.get_loops(stage)
        sch.parallel(loops[0])
    n, mb, ml, k = sch.get_loops(block)
    lanes = sch.get(ml).extent.value
    vectors, rows = register_tile(lanes)
    vectors = next(v for v in (vectors, 2, 1) if v <= vectors and sch.get(mb).extent.value % v == 0)
    depth = sch.get(k).extent.value
    kb = k_block(depth, depth * vectors * lanes * 4)
    if kb is None:
        cpu_conv.tile_in_registers(sch, block, mb, vectors, [], sch.split(n, [None, rows]), [k], ml)
        return
    mb_outer, mb_inner = sch.split(mb, [None, vectors])
    n_outer, n_inner = sch.split(n, [None, rows])
    k_outer, k_inner = sch.split(k, [None, kb])
    sch.reorder(mb_outer, k_outer, n_outer, k_inner, mb_inner, n_inner, ml)
    sch.parallel(mb_outer)
    sch.unroll(mb_inner)
    sch.unroll(n_inner)
    sch.vectorize(ml)
    # The sums accumulate in the packed result, which LLVM keeps in
    # registers over ``k_inner`` (it does not alias the arguments).
    init = sch.decompose_reduction(block, k_outer)
    sch.vectorize(sch.get_loops(init)[-1])
