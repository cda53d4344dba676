"""RoIAlign (fixed sampling ratio, NCHW) for the CPU.

TVM's kernel computes every sample's position, its four neighbours and
their weights again for each channel: Mask R-CNN's box pooling (1,000 RoIs,
256 channels, 7x7 bins, 2x2 samples) spent most of its time there, on one
thread. Sample positions are separable: a row's depends only on the RoI,
the bin row and the sample row. So this kernel first computes, per RoI,
each sample row's lower neighbour row, the next one (clamped) and the
weight of the next one, and the same per sample column (and whether the
sample falls outside the map); the channel loop then reads four values and
weighs them. RoIs are computed in parallel.

The arithmetic is TVM's (``topi.vision.roi_align``): the same RoI and bin
extents and the same clamping, with the sum of a bin's samples divided by
their number at the end, as onnxruntime does. In ``max`` mode a sample is
the largest of its four weighted neighbours and a bin the largest of its
samples, as ONNX's reference and onnxruntime define it (TVM's kernel takes
the largest interpolated sample instead); a sample outside the map counts
as 0 in both modes.
"""
from __future__ import annotations

from tvm import s_tir, te, tirx

#: Function attribute by which ``cpu_schedule`` recognizes the kernel.
ROI_ALIGN_ATTR = "shapefn.roi_align"


def roi_align_te(data: te.Tensor, rois: te.Tensor, pooled_size, spatial_scale: float, sample_ratio: int,
                 aligned: bool, mode: str = "avg") -> te.Tensor:
    """``[rois, channels, pooled_h, pooled_w]``: per bin the average (or
    ``mode="max"``, the maximum) of ``sample_ratio`` squared bilinear
    samples; ``rois`` rows are ``[batch, x1, y1, x2, y2]``."""
    _, _, height, width = data.shape
    num_rois = rois.shape[0]
    pooled_h, pooled_w = pooled_size
    dtype = rois.dtype
    samples = tirx.const(sample_ratio, dtype)

    def extent(r, start, end, pooled):
        """(start, bin size) of RoI ``r`` along one axis (columns ``start``, ``end`` of its row)."""
        low, high = rois[r, start] * spatial_scale, rois[r, end] * spatial_scale
        size = high - low if aligned else te.max(high - low, tirx.const(1.0, dtype))
        return low, size / tirx.const(pooled, dtype)

    def axis(name, start, end, pooled, size):
        """Per (RoI, bin, sample) along one axis: the lower neighbour, the
        upper one (clamped to the map), the upper one's weight, and whether
        the sample lies outside the map."""
        def position(r, p, i):
            low, step = extent(r, start, end, pooled)
            return low + tirx.Cast(dtype, p) * step + (tirx.Cast(dtype, i) + tirx.const(0.5, dtype)) * step / samples

        def clamped(r, p, i):
            return te.min(te.max(position(r, p, i), tirx.const(0.0, dtype)), tirx.Cast(dtype, size - 1))

        shape = (num_rois, pooled, sample_ratio)
        lower = te.compute(shape, lambda r, p, i: tirx.Cast("int64", te.floor(clamped(r, p, i))), name=f"{name}_low")
        upper = te.compute(shape, lambda r, p, i: te.min(lower[r, p, i] + 1, size - 1), name=f"{name}_high")
        weight = te.compute(shape, lambda r, p, i: clamped(r, p, i) - tirx.Cast(dtype, lower[r, p, i]),
                            name=f"{name}_weight")
        outside = te.compute(shape, lambda r, p, i: tirx.Or(position(r, p, i) < tirx.const(-1.0, dtype),
                                                            position(r, p, i) > tirx.Cast(dtype, size)),
                             name=f"{name}_outside")
        return lower, upper, weight, outside

    y_low, y_high, y_weight, y_outside = axis("y", 2, 4, pooled_h, height)
    x_low, x_high, x_weight, x_outside = axis("x", 1, 3, pooled_w, width)
    one, zero = tirx.const(1.0, dtype), tirx.const(0.0, dtype)

    def pool(r, c, ph, pw):
        image = tirx.Cast("int64", rois[r, 0])
        result = None
        for i in range(sample_ratio):
            ly, yl, yh = y_weight[r, ph, i], y_low[r, ph, i], y_high[r, ph, i]
            for j in range(sample_ratio):
                lx, xl, xh = x_weight[r, pw, j], x_low[r, pw, j], x_high[r, pw, j]
                terms = [(one - ly) * (one - lx) * data[image, c, yl, xl], (one - ly) * lx * data[image, c, yl, xh],
                         ly * (one - lx) * data[image, c, yh, xl], ly * lx * data[image, c, yh, xh]]
                value = terms[0] + terms[1] + terms[2] + terms[3] if mode == "avg" else \
                    te.max(te.max(terms[0], terms[1]), te.max(terms[2], terms[3]))
                value = tirx.if_then_else(tirx.Or(y_outside[r, ph, i], x_outside[r, pw, j]), zero, value)
                result = value if result is None else result + value if mode == "avg" else te.max(result, value)
        return result / tirx.const(sample_ratio * sample_ratio, dtype) if mode == "avg" else result

    return te.compute((num_rois, data.shape[1], pooled_h, pooled_w), pool, name="roi_align")


def is_roi_align(func: tirx.PrimFunc) -> bool:
    return func.attrs is not None and bool(func.attrs.get(ROI_ALIGN_ATTR, False))


def schedule(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """RoIs in parallel: each computes its sample tables, then its bins."""
    sch = s_tir.Schedule(func)
    out = sch.get_sblock("roi_align")
    r = sch.get_loops(out)[0]
    sch.parallel(r)
    for name in ("y_high", "y_weight", "y_outside", "y_low", "x_high", "x_weight", "x_outside", "x_low"):
        sch.compute_at(sch.get_sblock(name), r)
    return sch.mod["main"]
