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
  the output width is a whole number of tiles;
* the convolution (``conv2d_packed``) accumulates a tile of channel vectors
  by output columns (``register_tile``: 4 x 4 with AVX-512's 32 vector
  registers, 2 x 4 with 16; with AVX-512 a static width gets 4 x 5 or 2 x 7
  where they pad it less) in registers over every input channel and
  kernel position: each step is one weight-vector load per vector, one
  broadcast input value per column and a fused multiply-add per pair;
  tiles are parallel over groups of channel vectors;
* ``unpack`` writes the NCHW output, where the operations fused after the
  convolution (bias, activation) are computed too, one output row of a
  vector's channels at a time.

Every size but the channel counts and the kernel may be known only at run
time (batch: ROI counts; height and width: image sizes): the vectors run
over output channels, which are static. Each output element sums its
products in the same order as the unscheduled kernel.
"""
from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm import s_tir, sym, te, tirx

from .tir_builder import i64

# The annotation that marks the packed convolution's block for cpu_schedule.
ATTR = "shapefn.kernel"
BLOCK = "conv2d_packed"
# Register tiles (channel vectors, output columns) by the float32 lanes of
# the vectors, best first: AVX-512 has 32 vector registers, AVX2 and SSE 16.
# Measured on one core of an AVX-512 machine (bench kernels' convolutions,
# and built for x86-64-v3 for 8 lanes): 4 x 4 beat 2 x 8 by 0-20%, 4 x 5 ran
# as fast, 4 x 6 and 4 x 7 slower (LLVM keeps the broadcast inputs of the
# kernel's columns live across the accumulators and then spills); with 16
# registers 2 x 4 ran 1.3-1.6x faster than 2 x 8, which spills. A width
# known only at run time gets the first; a static one the tile that pads it
# least (the mask head's 14 columns: 2 x 7, 15% faster than 4 x 4's 16).
TILES = {16: [(4, 4), (4, 5), (2, 7)], 8: [(2, 4)], 4: [(2, 4)]}
_TILE_ATTR = "shapefn.tile"  # "<vectors>x<columns>", for the schedule


def register_tile(lanes_: int, out_w=None) -> tuple[int, int]:
    """(channel vectors, output columns) of the register tile for vectors
    of ``lanes_`` float32 lanes and ``out_w`` output columns (an int, or
    an expression known only at run time)."""
    tiles = TILES[lanes_]
    if not isinstance(out_w, int | tirx.IntImm):
        return tiles[0]
    width = int(out_w)
    return min(tiles, key=lambda tile: -(-width // tile[1]) * tile[1])


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
    out_h, out_w = output_size(height, width, kh, kw, strides, padding, dilation)
    vectors, columns = register_tile(lanes_, out_w)
    simplify = sym.Analyzer().simplify
    tiles_w = simplify((out_w + (columns - 1)) // columns * columns)
    padded_h = simplify((out_h - 1) * sh + dh * (kh - 1) + 1)
    padded_w = simplify((tiles_w - 1) * sw + dw * (kw - 1) + 1)
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
        name=BLOCK, attrs={ATTR: BLOCK, _TILE_ATTR: f"{vectors}x{columns}"})

    def at(b, channel, y, x):
        return conv[b, channel // lanes_, y, x, channel % lanes_]

    bh, bw = block_size
    if (bh, bw) == (1, 1):
        return te.compute((n, i64(out_channels), out_h, out_w), at, name="unpack")

    def spread(b, o, y, x):
        return at(b, o * (bh * bw) + (y % bh) * bw + x % bw, y // bh, x // bw)

    return te.compute((n, i64(out_channels // (bh * bw)), out_h * bh, out_w * bw), spread, name="unpack")


def output_size(height, width, kh: int, kw: int, strides, padding, dilation) -> tuple:
    """A convolution's output height and width, simplified as Relax's shape
    inference writes them: sizes in other terms would make the kernels after
    it other kernels (and grow with every layer of a dynamic-size model)."""
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    simplify = sym.Analyzer().simplify
    return (simplify((height + (top + bottom) - (dh * (kh - 1) + 1)) // sh + 1),
            simplify((width + (left + right) - (dw * (kw - 1) + 1)) // sw + 1))


def is_packed_conv(sch: s_tir.Schedule, block) -> bool:
    return str(sch.get(block).annotations.get(ATTR, "")) == BLOCK


def schedule(sch: s_tir.Schedule, block) -> None:
    """The register tiling of the module's docstring on the ``BLOCK`` block
    (parallel over groups of channel vectors)."""
    lanes_ = sch.get(sch.get_loops(block)[4]).extent.value
    for stage in sch.get_producers(block):
        loops = sch.get_loops(stage)
        sch.parallel(sch.fuse(*loops[:2]) if len(loops) > 1 else loops[0])
    for stage in unpack_with_epilogue(sch, block):
        _schedule_unpack(sch, stage, lanes_)
    b, ob, y, x, ol, ic, ry, rx = sch.get_loops(block)
    vectors, columns = (int(d) for d in str(sch.get(block).annotations[_TILE_ATTR]).split("x"))
    tile_in_registers(sch, block, ob, vectors, [b, y], sch.split(x, [None, columns]), [ic, ry, rx], ol)


def _schedule_unpack(sch: s_tir.Schedule, stage, lanes_: int) -> None:
    """The NCHW unpacking read one output row of ``lanes_`` channels at a
    time: that row of the packed result (``[lanes_ x width]``) stays in L1
    while its channels are written out, each a contiguous run of the output.
    (Channel by channel over whole maps, each read of the packed result
    fetched a cache line from L2 for one element: a third of a 1x1
    convolution's time.)"""
    loops = sch.get_loops(stage)
    channels = sch.get(loops[1]).extent if len(loops) == 4 else None
    if not isinstance(channels, tirx.IntImm):
        sch.parallel(sch.fuse(*loops[:2]) if len(loops) > 1 else loops[0])
        return
    b, c, y, x = loops
    c_outer, c_inner = sch.split(c, [None, lanes_])
    sch.reorder(b, c_outer, y, c_inner, x)
    sch.parallel(sch.fuse(b, c_outer))


def tile_in_registers(sch: s_tir.Schedule, block, vector_blocks, vectors: int, outer, tile, reductions,
                      lanes_) -> None:
    """The scheme the packed kernels share: ``vectors`` of the
    ``vector_blocks`` (or the most of 2 and 1 that divide them) by the inner
    loop of ``tile`` (outer, inner) accumulate in registers over the
    ``reductions``, the ``lanes_`` vectorized; parallel over groups of
    vector blocks."""
    extent = sch.get(vector_blocks).extent
    vectors = next(v for v in (vectors, 2, 1) if v <= vectors and extent.value % v == 0)
    blocks_outer, blocks_inner = sch.split(vector_blocks, [None, vectors])
    tile_outer, tile_inner = tile
    sch.reorder(blocks_outer, *outer, tile_outer, *reductions, blocks_inner, tile_inner, lanes_)
    # (Fusing the ``outer`` loops into the parallel one, for layers with few
    # channel groups, made SSD300's kernel for its one-pixel extra layer
    # write out of bounds inside TVM's parallel launch.)
    sch.parallel(blocks_outer)
    accumulators = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(accumulators, tile_outer)
    sch.unroll(blocks_inner)
    sch.unroll(tile_inner)
    sch.vectorize(lanes_)
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
