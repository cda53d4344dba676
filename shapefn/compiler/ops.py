"""Relax builders for data-dependent ops whose runtime values Relax cannot
express (top-k with a tensor ``k``, tile with tensor repeats, arange with
tensor bounds, resize to a tensor size, pad with tensor pads).

Each emits, inside a ``relax.BlockBuilder`` function, the registered host
shape function of the op, a ``match_cast`` binding fresh size variables, and
a kernel with those sizes. ``shapefn.compile`` lowers them like the built-in
Relax ops it handles itself (dynamic_strided_slice, reshape / full /
broadcast_to from ``tensor_to_shape``, nonzero, unique, NMS)."""
from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm import relax

from .kernels import dynamic, resize
from .shape_calls import emit_shape

_RESIZE_LAYOUTS = {"NCHW": 0, "NHWC": 1}


def _kernel(bb: relax.BlockBuilder, name: str, make) -> relax.GlobalVar:
    mod = bb.get()
    for gv in mod.functions:
        if gv.name_hint == name:
            return gv
    return bb.add_func(make(), name)


def _ty(expr: relax.Expr) -> relax.TensorType:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.ndim < 0 or ty.dtype is None:
        raise TypeError(f"expected a tensor of known rank and dtype, got {ty}")
    return ty


def _scalar(bb: relax.BlockBuilder, value: relax.Expr, dtype: str) -> relax.Expr:
    """``value`` as a 0-d tensor of ``dtype``."""
    ty = _ty(value)
    if str(ty.dtype) != dtype:
        value = bb.emit(relax.op.astype(value, dtype))
    if ty.ndim != 0:
        value = bb.emit(relax.op.reshape(value, []))
    return value


def topk(bb: relax.BlockBuilder, data: relax.Expr, k: relax.Expr, axis: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[relax.Expr, relax.Expr]:  # noqa: A002 - ONNX's name
    """(values, int64 indices) of the ``k`` largest (or smallest) elements
    along ``axis``; ``k`` is an int64 tensor (0-d or one element)."""
    ty = _ty(data)
    ndim, dtype = ty.ndim, str(ty.dtype)
    axis = axis + ndim if axis < 0 else axis
    values_dims, _ = emit_shape(bb, "relax.topk", [data, k], [ndim, ndim], [axis], prefix="topk")
    kernel = _kernel(bb, f"shapefn_topk_{ndim}d_{axis}_{dtype}_{int(largest)}{int(sorted)}",
                     lambda: dynamic.topk(ndim, axis, dtype, largest, sorted))
    out = bb.emit(relax.call_tir(kernel, [data], [relax.TensorType(values_dims, dtype),
                                                  relax.TensorType(values_dims, "int64")]))
    return bb.emit(relax.TupleGetItem(out, 0)), bb.emit(relax.TupleGetItem(out, 1))


def tile(bb: relax.BlockBuilder, data: relax.Expr, repeats: relax.Expr) -> relax.Expr:
    """``np.tile(data, repeats)`` with ``repeats`` an int64 1-D tensor."""
    ty, rty = _ty(data), _ty(repeats)
    if rty.ndim != 1 or rty.shape is None or not isinstance(rty.shape.values[0], tvm.tirx.IntImm):
        raise TypeError("tile: repeats must be a 1-D tensor of static length")
    out_ndim = max(ty.ndim, int(rty.shape.values[0]))
    (dims,) = emit_shape(bb, "relax.tile", [data, repeats], [out_ndim], prefix="tile")
    dtype = str(ty.dtype)
    kernel = _kernel(bb, f"shapefn_tile_{ty.ndim}d_{out_ndim}d_{dtype}",
                     lambda: dynamic.tile(ty.ndim, out_ndim, dtype))
    return bb.emit(relax.call_tir(kernel, [data], relax.TensorType(dims, dtype)))


def arange(bb: relax.BlockBuilder, start: relax.Expr, stop: relax.Expr, step: relax.Expr,
           dtype: str | None = None, values: tuple[relax.Expr, relax.Expr] | None = None) -> relax.Expr:
    """``np.arange(start, stop, step)`` from scalar tensors (ONNX Range).
    ``values`` (a first value and a step) replace ``start`` and ``step`` in
    the values, where the length is computed apart (half precision)."""
    dtype = dtype or str(_ty(start).dtype)
    (dims,) = emit_shape(bb, "relax.arange", [start, stop, step], [1], prefix="arange")
    kernel = _kernel(bb, f"shapefn_arange_{dtype}", lambda: dynamic.arange(dtype))
    first, delta = values or (start, step)
    return bb.emit(relax.call_tir(kernel, [_scalar(bb, first, dtype), _scalar(bb, delta, dtype)],
                                  relax.TensorType(dims, dtype)))


def resize2d(bb: relax.BlockBuilder, data: relax.Expr, size: relax.Expr, *, layout: str = "NCHW",
             method: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
             rounding_method: str = "round_prefer_floor", cubic_alpha: float = -0.75,
             cubic_exclude: int = 0, scales: relax.Expr | None = None) -> relax.Expr:
    """Resizes 4-D ``data`` to ``size`` (int64 [2]: height, width), with
    ONNX Resize's modes and names; ``scales`` (float32 [2]: height, width),
    where the model gives scales, map output to input coordinates as ONNX
    does (``size`` is then the scaled sizes rounded down)."""
    if layout not in _RESIZE_LAYOUTS:
        raise ValueError(f"resize2d: layout must be NCHW or NHWC, got {layout!r}")
    ty = _ty(data)
    dtype = str(ty.dtype)
    (dims,) = emit_shape(bb, "relax.image.resize2d", [data, size], [4], [_RESIZE_LAYOUTS[layout]],
                         prefix="resize")
    name = (f"shapefn_resize2d_{layout}_{method}_{coordinate_transformation_mode}_{rounding_method}_"
            f"{cubic_alpha}_{cubic_exclude}_{dtype}{'_scaled' if scales is not None else ''}"
            ).replace("-", "m").replace(".", "p")
    kernel = _kernel(bb, name, lambda: resize.resize2d(
        layout, method, coordinate_transformation_mode, rounding_method, cubic_alpha, cubic_exclude, 0.0, dtype,
        scaled=scales is not None))
    args = [data] if scales is None else [data, scales]
    return bb.emit(relax.call_tir(kernel, args, relax.TensorType(dims, dtype)))


def pad(bb: relax.BlockBuilder, data: relax.Expr, pads: relax.Expr, value: relax.Expr | None = None,
        mode: str = "constant") -> relax.Expr:
    """ONNX Pad: ``pads`` int64 [2 * ndim] as [begins..., ends...] (negative
    crops); ``value`` a scalar tensor for ``mode="constant"``."""
    ty = _ty(data)
    ndim, dtype = ty.ndim, str(ty.dtype)
    if value is None:
        value = relax.const(0, dtype)
    value = _scalar(bb, value, dtype)
    (dims,) = emit_shape(bb, "relax.nn.pad", [data, pads, value], [ndim], prefix="pad")
    kernel = _kernel(bb, f"shapefn_pad_{ndim}d_{dtype}_{mode}", lambda: dynamic.pad(ndim, dtype, mode))
    return bb.emit(relax.call_tir(kernel, [data, pads, value], relax.TensorType(dims, dtype)))


__all__: Sequence[str] = ["arange", "pad", "resize2d", "tile", "topk"]
