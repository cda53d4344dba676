"""2-D convolution on the CPU as a register-tiled implicit GEMM.

TVM's default convolution (and the reduction schedule of
``cpu_schedule.py``) computes one output element at a time and vectorizes
only over a static output width divisible by 4: a 14x14 map is not, and
Mask R-CNN's mask head ran at a tenth of the machine's speed. Here:

* the weight, a constant, is packed at compile time into
  ``[O / L, I, KH, KW, L]`` (``L`` output channels per vector register,
  zero-padded to a multiple of ``L``), so one vector load fetches the
  weights of ``L`` output channels;
* the input is padded once (``pad``): its borders, and its width so that
  the output width is a whole number of ``COLUMNS`` tiles;
* the convolution (``conv2d_packed``) accumulates a tile of ``VECTORS``
  channel vectors by ``COLUMNS`` output columns in registers over every
  input channel and kernel position: each step is ``VECTORS`` weight-vector
  loads, ``COLUMNS`` broadcast input values and ``VECTORS * COLUMNS``
  fused multiply-adds; tiles are parallel over channel blocks;
* ``unpack`` writes the NCHW output, where the operations fused after the
  convolution (bias, activation) are computed too.

Every size but the channel counts and the kernel may be known only at run
time (batch: ROI counts; height and width: image sizes): the vectors run
over output channels, which are static. Each output element sums its
products in the same order as the unscheduled kernel.
"""
from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import s_tir, te, tirx

from .tir_builder import i64

# The annotation that marks the packed convolution's block for cpu_schedule.
ATTR = "shapefn.kernel"
BLOCK = "conv2d_packed"
COLUMNS = 8  # output columns per register tile
VECTORS = 2  # channel vectors per register tile


def lanes(features) -> int:
    """float32 lanes of the widest vector register ``features`` (LLVM's
    names) give: 16 with AVX-512, 8 with AVX, 4 otherwise."""
    features = set(features)
    return 16 if "avx512f" in features else 8 if "avx" in features else 4


def pack_weight(weight: np.ndarray, lanes_: int) -> np.ndarray:
    """OIHW ``weight`` as ``[ceil(O / lanes), I, KH, KW, lanes]``, the
    channels past O zero."""
    out_channels = weight.shape[0]
    blocks = -(-out_channels // lanes_)
    padded = np.zeros((blocks * lanes_, *weight.shape[1:]), weight.dtype)
    padded[:out_channels] = weight
    return np.ascontiguousarray(padded.reshape(blocks, lanes_, *weight.shape[1:]).transpose(0, 2, 3, 4, 1))


def transposed_weight(weight: np.ndarray) -> np.ndarray:
    """The IOHW weight of a transposed convolution whose stride equals its
    kernel (each input pixel makes its own kh x kw block of outputs) as the
    OIHW weight of a 1x1 convolution with O * kh * kw outputs, channel
    ``o * kh * kw + dy * kw + dx`` for output ``o`` at offset (dy, dx)."""
    in_channels, out_channels, kh, kw = weight.shape
    return np.ascontiguousarray(weight.transpose(1, 2, 3, 0).reshape(out_channels * kh * kw, in_channels, 1, 1))


def conv2d_te(data: te.Tensor, packed: te.Tensor, out_channels: int, strides, padding, dilation,
              out_dtype: str, block_size=(1, 1)) -> te.Tensor:
    """NCHW ``data`` convolved with the packed weight (``pack_weight``);
    ``padding`` is (top, left, bottom, right). The result is NCHW with
    ``out_channels`` channels; with a ``block_size`` (bh, bw) other than
    (1, 1), each group of bh * bw consecutive channels is spread over a bh x
    bw block of pixels (depth to space), making ``out_channels / (bh * bw)``
    channels of bh x bw times the size: a transposed convolution whose
    stride equals its kernel (``transposed_weight``)."""
    n, _, height, width = data.shape
    blocks, in_channels, kh, kw, lanes_ = (int(d) for d in packed.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    out_h = (height + (top + bottom) - (dh * (kh - 1) + 1)) // sh + 1
    out_w = (width + (left + right) - (dw * (kw - 1) + 1)) // sw + 1
    tiles_w = (out_w + (COLUMNS - 1)) // COLUMNS * COLUMNS
    padded_h = (out_h - 1) * sh + dh * (kh - 1) + 1
    padded_w = (tiles_w - 1) * sw + dw * (kw - 1) + 1
    zero = tirx.const(0, data.dtype)

    def pad(b, c, y, x):
        inside = tirx.all(y >= top, y < height + top, x >= left, x < width + left)
        return tirx.if_then_else(inside, data[b, c, y - top, x - left], zero)

    padded = te.compute((n, i64(in_channels), padded_h, padded_w), pad, name="pad")
    ic = te.reduce_axis((0, i64(in_channels)), "ic")
    ry = te.reduce_axis((0, i64(kh)), "ry")
    rx = te.reduce_axis((0, i64(kw)), "rx")
    conv = te.compute(
        (n, i64(blocks), out_h, tiles_w, i64(lanes_)),
        lambda b, ob, y, x, ol: te.sum(
            padded[b, ic, y * sh + ry * dh, x * sw + rx * dw].astype(out_dtype)
            * packed[ob, ic, ry, rx, ol].astype(out_dtype), axis=[ic, ry, rx]),
        name=BLOCK, attrs={ATTR: BLOCK})

    def at(b, channel, y, x):
        return conv[b, channel // lanes_, y, x, channel % lanes_]

    bh, bw = block_size
    if (bh, bw) == (1, 1):
        return te.compute((n, i64(out_channels), out_h, out_w), at, name="unpack")

    def spread(b, o, y, x):
        return at(b, o * (bh * bw) + (y % bh) * bw + x % bw, y // bh, x // bw)

    return te.compute((n, i64(out_channels // (bh * bw)), out_h * bh, out_w * bw), spread, name="unpack")


def is_packed_conv(sch: s_tir.Schedule, block) -> bool:
    return str(sch.get(block).annotations.get(ATTR, "")) == BLOCK


def schedule(sch: s_tir.Schedule, block) -> None:
    """The register tiling of the module's docstring on the ``BLOCK`` block
    (parallel over blocks of output channels: every model's convolutions
    have at least as many as a few cores)."""
    for stage in [*sch.get_producers(block), *unpack_with_epilogue(sch, block)]:
        loops = sch.get_loops(stage)
        sch.parallel(sch.fuse(*loops[:2]) if len(loops) > 1 else loops[0])
    b, ob, y, x, ol, ic, ry, rx = sch.get_loops(block)
    tile_in_registers(sch, block, ob, [b, y], sch.split(x, [None, COLUMNS]), [ic, ry, rx], ol)


def tile_in_registers(sch: s_tir.Schedule, block, vector_blocks, outer, tile, reductions, lanes) -> None:
    """The scheme the packed kernels share: ``VECTORS`` of the
    ``vector_blocks`` (when they divide them) by the inner loop of ``tile``
    (outer, inner) accumulate in registers over the ``reductions``, the
    ``lanes`` vectorized; parallel over groups of vector blocks, then the
    ``outer`` loops."""
    extent = sch.get(vector_blocks).extent
    vectors = VECTORS if isinstance(extent, tirx.IntImm) and extent.value % VECTORS == 0 else 1
    blocks_outer, blocks_inner = sch.split(vector_blocks, [None, vectors])
    tile_outer, tile_inner = tile
    sch.reorder(blocks_outer, *outer, tile_outer, *reductions, blocks_inner, tile_inner, lanes)
    sch.parallel(blocks_outer)
    accumulators = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(accumulators, tile_outer)
    sch.unroll(blocks_inner)
    sch.unroll(tile_inner)
    sch.vectorize(lanes)
    sch.decompose_reduction(block, reductions[0])
    sch.vectorize(sch.get_loops(accumulators)[-1])


def unpack_with_epilogue(sch: s_tir.Schedule, block) -> list:
    """The consumers of ``block`` (the unpacking), each with the chain of
    elementwise operations fused after it computed inline: while the chain's
    last block has one consumer, which reads nothing else computed here
    (hardswish's product reads the unpacked value twice) and writes a buffer
    of the same shape (not a broadcast, as a squeeze-excite's product)."""
    consumers = sch.get_consumers(block)
    for unpack in consumers:
        shape = _written_shape(sch, unpack)
        while True:
            following = sch.get_consumers(unpack)
            if len(following) != 1 or len(sch.get_producers(following[0])) != 1 \
                    or not tvm_ffi.structural_equal(_written_shape(sch, following[0]), shape):
                break
            try:
                sch.reverse_compute_inline(following[0])
            except s_tir.ScheduleError:
                break
    return consumers


def _written_shape(sch: s_tir.Schedule, block):
    writes = sch.get(block).writes
    return list(writes[0].source.shape) if len(writes) == 1 else None
