"""Depthwise 2-D convolution (MobileNet's: one group per input channel) on
the CPU, vectorized over output columns.

TVM's default kernel for a grouped convolution runs on one core, one
output at a time, with the operations fused after it (bias, activation) in
passes of their own. A depthwise convolution has few products per output
(9 for 3x3), so what counts is reading the input once per vector of
outputs and keeping the cores busy:

* the input is padded once (``pad``), its borders and its width (so the
  output width is a whole number of ``columns``-wide tiles), its columns
  split by their phase in the stride: padded column ``j * sw + p`` is
  stored at ``[p, j]``, so that a vector of outputs reads a contiguous
  run of each phase at any stride;
* ``depthwise`` accumulates a vector of output columns (the machine's
  lanes) in registers over the kernel window, its loops unrolled; parallel
  over (image, channel), each channel's padded input computed just before
  it is read;
* ``unpack`` crops the padded width, computing the operations fused after
  the convolution.

Batch, height and width may be known only at run time: the vectors run
over a width padded to whole tiles. Each output sums its products in the
order of the unscheduled kernel (rows, then columns of the window).
"""
from __future__ import annotations

from tvm import s_tir, sym, te, tirx

from . import cpu_conv
from .tir_builder import i64

BLOCK = "depthwise"
# Vectors of output columns per register tile. One ran 15-30% faster than
# two on MobileNetV3's layers (80 and 40 columns: two vectors of 16 pad 40
# to 64).
VECTORS = 1
_LANES_ATTR = "shapefn.lanes"  # the vectors' lanes, for the schedule


def depthwise_te(data: te.Tensor, weight: te.Tensor, groups: int, strides, padding, dilation, out_dtype: str,
                 lanes: int) -> te.Tensor:
    """NCHW ``data`` of ``groups`` channels convolved with an OIHW
    ``weight`` of one input channel per group (``O / groups`` outputs per
    input channel); ``padding`` is (top, left, bottom, right); vectors of
    ``lanes`` float32 lanes."""
    n, _, height, width = data.shape
    out_channels, _, kh, kw = (int(d) for d in weight.shape)
    channels, multiplier = i64(groups), out_channels // groups
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    out_h, out_w = cpu_conv.output_size(height, width, kh, kw, strides, padding, dilation)
    columns = lanes * VECTORS
    simplify = sym.Analyzer().simplify
    tiles_w = simplify((out_w + (columns - 1)) // columns * columns)
    padded_h = simplify((out_h - 1) * sh + dh * (kh - 1) + 1)
    phase_w = simplify(tiles_w + i64(dw * (kw - 1) // sw))
    zero = tirx.const(0, data.dtype)

    def pad(b, c, y, phase, j):
        x = j * sw + phase
        inside = tirx.all(y >= top, y < height + top, x >= left, x < width + left)
        return tirx.if_then_else(inside, data[b, c, y - top, x - left], zero)

    padded = te.compute((n, channels, padded_h, i64(sw), phase_w), pad, name="pad")
    ry = te.reduce_axis((0, i64(kh)), "ry")
    rx = te.reduce_axis((0, i64(kw)), "rx")
    conv = te.compute(
        (n, i64(out_channels), out_h, tiles_w),
        lambda b, o, y, x: te.sum(
            padded[b, o // multiplier, y * sh + ry * dh, (rx * dw) % sw, x + (rx * dw) // sw].astype(out_dtype)
            * weight[o, 0, ry, rx].astype(out_dtype), axis=[ry, rx]),
        name=BLOCK, attrs={cpu_conv.ATTR: BLOCK, _LANES_ATTR: lanes})
    return te.compute((n, i64(out_channels), out_h, out_w), lambda b, o, y, x: conv[b, o, y, x], name="unpack")


def is_depthwise(sch: s_tir.Schedule, block) -> bool:
    return str(sch.get(block).annotations.get(cpu_conv.ATTR, "")) == BLOCK


def schedule(sch: s_tir.Schedule, block) -> None:
    """The tiling of the module's docstring on the ``BLOCK`` block."""
    lanes = int(sch.get(block).annotations[_LANES_ATTR])
    (pad,) = sch.get_producers(block)
    unpacks = cpu_conv.unpack_with_epilogue(sch, block)
    b, o, y, x, ry, rx = sch.get_loops(block)
    x_outer, x_vectors, x_lanes = sch.split(x, [None, VECTORS, lanes])
    sch.reorder(b, o, y, x_outer, ry, rx, x_vectors, x_lanes)
    plane = sch.fuse(b, o)
    sch.parallel(plane)
    accumulators = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(accumulators, x_outer)
    sch.unroll(ry)
    sch.unroll(rx)
    sch.unroll(x_vectors)
    sch.vectorize(x_lanes)
    sch.decompose_reduction(block, ry)
    sch.vectorize(sch.get_loops(accumulators)[-1])
    sch.compute_at(pad, plane)  # (one channel's padded input, in cache when read)
    for unpack in unpacks:
        loops = sch.get_loops(unpack)
        sch.parallel(sch.fuse(*loops[:2]))
