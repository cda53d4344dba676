"""Strided slices with begin and strides known only at run time, and the
slice parameters of a region of interest."""
from __future__ import annotations

from tvm import te, tirx

from .tir_builder import i64, sizes


def _slice_index(begin, stride, dim, i):
    """Element ``i`` of Python slicing: ``begin`` normalised and clipped like
    ``slice.indices`` (the shape function computes the extent the same way)."""
    b = tirx.if_then_else(begin < 0, begin + dim, begin)
    lo = tirx.if_then_else(stride > 0, tirx.const(0, "int64"), tirx.const(-1, "int64"))
    hi = tirx.if_then_else(stride > 0, dim, dim - 1)
    b = tirx.max(tirx.min(b, hi), lo)
    return b + i * stride


def strided_slice(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """``out = data[begin::strides]`` per axis; begin/strides are int64 tensors."""
    data = te.placeholder(sizes("n", ndim), dtype, name="data")
    begin = te.placeholder((i64(ndim),), "int64", name="begin")
    strides = te.placeholder((i64(ndim),), "int64", name="strides")
    out = te.compute(
        sizes("m", ndim),
        lambda *idx: data[tuple(_slice_index(begin[a], strides[a], data.shape[a], idx[a]) for a in range(ndim))],
        name="out")
    return te.create_prim_func([data, begin, strides, out])


def slice_extents(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """The shape of ``data[begin:end:strides]`` (``data, begin, end, strides,
    out``: data gives only its sizes, never read; the others are int64
    [ndim]), computed as the shape function ``relax.dynamic_strided_slice``
    computes it, with -1 where a stride is 0 (the shape function
    ``shapefn.slice_extents``, which reads this output, reports it). Runs
    on the device where begin/end/strides are: only the ``ndim`` extents
    then cross."""
    data = te.placeholder(sizes("n", ndim), dtype, name="data")
    begin, end, strides = (te.placeholder((i64(ndim),), "int64", name=n) for n in ("begin", "end", "strides"))
    zero, one = tirx.const(0, "int64"), tirx.const(1, "int64")

    def extent(a):
        dim = data.shape[-1]
        for k in range(ndim - 2, -1, -1):
            dim = tirx.Select(a == k, data.shape[k], dim)
        b, e, s = begin[a], end[a], strides[a]
        lower = tirx.Select(s < 0, -one, zero)
        upper = tirx.Select(s < 0, dim - 1, dim)

        def clip(index):
            return tirx.Select(index < 0, tirx.max(index + dim, lower), tirx.min(index, upper))

        span = tirx.Select(s > 0, clip(e) - clip(b), clip(b) - clip(e))
        step = tirx.Select(s > 0, s, zero - s)  # (INT64_MIN wraps to itself: span - 1 < -step, one element)
        count = tirx.Select(span <= 0, zero, tirx.truncdiv(span - 1, step) + 1)
        return tirx.Select(s == 0, -one, count)

    out = te.compute((i64(ndim),), extent, name="out")
    return te.create_prim_func([data, begin, end, strides, out])


def strided_slice_scalar(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """Like ``strided_slice`` with begin and strides passed as int64 scalars
    (``data, out, b0..b{n-1}, s0..s{n-1}``): parameters computed on the host
    reach the kernel without any copy."""
    data = te.placeholder(sizes("n", ndim), dtype, name="data")
    begin = sizes("b", ndim)
    strides = sizes("s", ndim)
    out = te.compute(
        sizes("m", ndim),
        lambda *idx: data[tuple(_slice_index(begin[a], strides[a], data.shape[a], idx[a]) for a in range(ndim))],
        name="out")
    return te.create_prim_func([data, out, *begin, *strides])


def roi_params() -> tirx.PrimFunc:
    """Slice parameters of ROI ``index`` from ``rois`` (int64 [R, 5]: image,
    y0, x0, y1, x1) over an NCHW feature map: begin, end and strides, each
    int64 [4]. All channels are kept (end clipped by the shape function)."""
    r = te.var("r", "int64")
    rois = te.placeholder((r, i64(5)), "int64", name="rois")
    index = te.var("index", "int64")
    everything = tirx.const(1 << 40, "int64")

    def pick(a, image, channels, y, x):
        return tirx.Select(a == 0, image, tirx.Select(a == 1, channels, tirx.Select(a == 2, y, x)))

    begin = te.compute((i64(4),), lambda a: pick(a, rois[index, 0], tirx.const(0, "int64"),
                                            rois[index, 1], rois[index, 2]), name="begin")
    end = te.compute((i64(4),), lambda a: pick(a, rois[index, 0] + 1, everything,
                                          rois[index, 3], rois[index, 4]), name="end")
    strides = te.compute((i64(4),), lambda a: tirx.const(1, "int64") + a * 0, name="strides")
    return te.create_prim_func([rois, index, begin, end, strides])
