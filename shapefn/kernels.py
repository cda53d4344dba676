"""TVM-compiled kernels for hand-built VM programs (benchmarks, demo, tests).

Each function returns a TIR PrimFunc with symbolic sizes; ``build`` compiles
a dict of them into one library whose functions the VM calls.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import tvm
from tvm import te, tirx
from tvm.script import tirx as T

from . import kernel_cache
from .compiler import target_schedule


def _sizes(prefix: str, ndim: int) -> list:
    return [te.var(f"{prefix}{i}", "int64") for i in range(ndim)]


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
    data = te.placeholder(_sizes("n", ndim), dtype, name="data")
    begin = te.placeholder((ndim,), "int64", name="begin")
    strides = te.placeholder((ndim,), "int64", name="strides")
    out = te.compute(
        _sizes("m", ndim),
        lambda *idx: data[tuple(_slice_index(begin[a], strides[a], data.shape[a], idx[a]) for a in range(ndim))],
        name="out")
    return te.create_prim_func([data, begin, strides, out])


def strided_slice_scalar(ndim: int, dtype: str = "float32") -> tirx.PrimFunc:
    """Like ``strided_slice`` with begin and strides passed as int64 scalars
    (``data, out, b0..b{n-1}, s0..s{n-1}``): parameters computed on the host
    reach the kernel without any copy."""
    data = te.placeholder(_sizes("n", ndim), dtype, name="data")
    begin = _sizes("b", ndim)
    strides = _sizes("s", ndim)
    out = te.compute(
        _sizes("m", ndim),
        lambda *idx: data[tuple(_slice_index(begin[a], strides[a], data.shape[a], idx[a]) for a in range(ndim))],
        name="out")
    return te.create_prim_func([data, out, *begin, *strides])


def roi_params() -> tirx.PrimFunc:
    """Slice parameters of ROI ``index`` from ``rois`` (int64 [R, 5]: image,
    y0, x0, y1, x1) over an NCHW feature map: begin, end and strides, each
    int64 [4]. All channels are kept (end clipped by the shape function)."""
    r = te.var("r", "int64")
    rois = te.placeholder((r, 5), "int64", name="rois")
    index = te.var("index", "int64")
    everything = tirx.const(1 << 40, "int64")

    def pick(a, image, channels, y, x):
        return tirx.Select(a == 0, image, tirx.Select(a == 1, channels, tirx.Select(a == 2, y, x)))

    begin = te.compute((4,), lambda a: pick(a, rois[index, 0], tirx.const(0, "int64"),
                                            rois[index, 1], rois[index, 2]), name="begin")
    end = te.compute((4,), lambda a: pick(a, rois[index, 0] + 1, everything,
                                          rois[index, 3], rois[index, 4]), name="end")
    strides = te.compute((4,), lambda a: tirx.const(1, "int64") + a * 0, name="strides")
    return te.create_prim_func([rois, index, begin, end, strides])


def scale(dtype: str = "float32", ndim: int = 1) -> tirx.PrimFunc:
    """``out = x * factor`` elementwise, factor a float scalar."""
    x = te.placeholder(_sizes("n", ndim), dtype, name="x")
    factor = te.var("factor", dtype)
    out = te.compute(x.shape, lambda *i: x[i] * factor, name="out")
    return te.create_prim_func([x, factor, out])


def nonzero_1d(dtype: str = "float32") -> tirx.PrimFunc:
    """Indices of the non-zero elements of a 1-D ``x`` written, compacted, to
    the front of ``out`` (int64 [1, n], an upper bound) and their number to
    ``count`` (int64 scalar): the count-sized kernel convention."""

    @T.prim_func
    def func(x_handle: T.handle, out_handle: T.handle, count_handle: T.handle):
        n = T.int64()
        x = T.match_buffer(x_handle, (n,), dtype)
        out = T.match_buffer(out_handle, (1, n), "int64")
        count = T.match_buffer(count_handle, (), "int64")
        count[()] = T.int64(0)
        for i in range(n):
            if x[i] != T.Cast(dtype, 0):
                out[0, count[()]] = i
                count[()] = count[()] + T.int64(1)

    return func


def build(funcs: Mapping[str, tirx.PrimFunc], target="llvm", host: Collection[str] = ()):
    """Compiles ``{name: PrimFunc}`` into one TVM runtime library, ready to
    run, each kernel scheduled for ``target`` (a GPU target, e.g.
    ``"opencl"``: on the device, but for those named in ``host``; its host
    code is built for the CPU).

    A CPU library is returned as built (it can be exported). A GPU library
    comes through the kernel cache, loaded back from its file: device code
    runs only once the device's runtime has loaded it (shapefn's, for
    OpenCL), and a loaded library cannot be exported again."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if not target_schedule.is_gpu(target):
        return tvm.tirx.build(target_schedule.schedule(funcs, target, host).module, target)
    if target.host is None:
        target = tvm.target.Target(target, host="llvm")
    scheduled = target_schedule.schedule(funcs, target, host)
    library, _ = kernel_cache.build(scheduled.module, target, scheduled.version)
    return library


def concat(num_inputs: int, ndim: int, axis: int, dtype: str = "float32") -> tirx.PrimFunc:
    """Concatenation along ``axis`` of inputs whose other sizes are equal at
    run time but symbolically unrelated (each input has its own size
    variables); the output takes the first input's sizes off the axis."""
    inputs = [te.placeholder(_sizes(f"s{k}_", ndim), dtype, name=f"x{k}") for k in range(num_inputs)]
    offsets = [tirx.const(0, "int64")]
    for x in inputs:
        offsets.append(offsets[-1] + x.shape[axis])
    out_dims = [offsets[-1] if d == axis else inputs[0].shape[d] for d in range(ndim)]

    def element(*idx):
        j = idx[axis]

        def read(k):
            return inputs[k][tuple(j - offsets[k] if d == axis else idx[d] for d in range(ndim))]

        value = read(num_inputs - 1)
        for k in reversed(range(num_inputs - 1)):
            value = tirx.if_then_else(j < offsets[k + 1], read(k), value)
        return value

    out = te.compute(out_dims, element, name="out")
    return te.create_prim_func([*inputs, out])
