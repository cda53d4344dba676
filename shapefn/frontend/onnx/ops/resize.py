"""shapefn's ONNX converters for Resize and Upsample. Resize of 4-D data
in the modes shapefn's resize kernel has (``ops.resize2d``): sizes or
scales known only at run time, sizes or scales for some axes (``axes``),
the aspect-ratio policies, and coordinates mapped through the model's
scales (as ONNX maps them). ``tf_crop_and_resize`` (a region of interest
and an extrapolation value) and ``antialias`` (a filter widened when
downscaling) are computed axis by axis as ONNX's reference computes them:
each output element gathers its taps along the axis and sums them weighted.
Upsample (opsets 7 to 9) is a Resize with ``asymmetric`` coordinates."""
from __future__ import annotations

import numpy as np
from tvm import relax

from ....compiler import ops
from ....runtime.errors import UnsupportedOnnxOp
from ..registry import converter
from ..values import absent, as_tensor, const_value, ndim_of, str_attr

_F32 = "float32"
_FLOATS = ("float16", "bfloat16", "float32", "float64")
# Half the width of each mode's filter, in input pixels at scale 1.
_SUPPORT = {"linear": 1, "cubic": 2}


@converter("Resize")
def resize(importer, inputs, attrs, opset):
    """Resize of data to sizes or scales known only at run time (or given
    as an empty scales tensor beside sizes, as torchvision exports)."""
    if opset < 11:
        return NotImplemented
    data = inputs[0]
    roi = inputs[1] if len(inputs) > 1 else None
    scales = inputs[2] if len(inputs) > 2 else None
    sizes = inputs[3] if len(inputs) > 3 else None
    mode = str_attr(attrs.get("mode"), "nearest")
    coordinates = str_attr(attrs.get("coordinate_transformation_mode"), "half_pixel")
    antialias = bool(int(attrs.get("antialias", 0)))
    if antialias and mode == "nearest":
        # (ONNX's reference and onnxruntime refuse it too: the spec defines antialias for linear and cubic)
        raise UnsupportedOnnxOp("Resize with antialias=1 and mode nearest is not supported (antialias is "
                                "defined for linear and cubic)", {"Resize": []})
    if coordinates == "tf_crop_and_resize" or antialias:
        return _resize_by_axis(importer, data, roi, scales, sizes, attrs, antialias)
    if ndim_of(data) != 4:
        return NotImplemented
    return _resize_4d(importer, data, scales, sizes, attrs)


@converter("Upsample")
def upsample(importer, inputs, attrs, opset):
    """Upsample: ``floor(input * scale)`` per axis, coordinates ``x / scale``,
    the nearest pixel rounded down (as onnxruntime computes it). The scales
    are an attribute before opset 9, an input from it."""
    scales = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
    if scales is None:
        if attrs.get("scales") is None:
            raise ValueError("Upsample needs scales")
        scales = relax.const(np.asarray(attrs["scales"], np.float32), _F32)
    mode = str_attr(attrs.get("mode"), "nearest")
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    if mode not in ("nearest", "linear"):
        raise UnsupportedOnnxOp(f"Upsample's mode {mode!r} is not one of nearest, linear", {"Upsample": []})
    attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    if ndim_of(inputs[0]) != 4:
        return _resize_by_axis(importer, inputs[0], None, scales, None, attrs, False)
    return _resize_4d(importer, inputs[0], scales, None, attrs)


def _resize_4d(importer, data, scales, sizes, attrs):
    """4-D Resize through shapefn's resize kernel."""
    bb = importer.bb
    if attrs.get("axes") is not None:
        sizes, scales = (_resize_all_axes(importer, data, value, [int(a) for a in attrs["axes"]], default)
                         for value, default in ((sizes, "shape"), (scales, 1.0)))
    hw_scales = None
    policy = str_attr(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if not absent(importer, sizes) and policy != "stretch":
        axes = [int(a) % 4 for a in attrs.get("axes", range(4))]
        size, all_scales = _keep_aspect_ratio(bb, data, as_tensor(bb, sizes, "int64"), axes, policy)
        hw_scales = bb.emit(relax.op.strided_slice(all_scales, axes=[0], begin=[2], end=[4]))
    elif not absent(importer, sizes):
        size = as_tensor(bb, sizes, "int64")
    elif not absent(importer, scales):
        size = _scaled_sizes(bb, data, scales)
        # (ONNX maps coordinates through the scales, not the sizes' ratio)
        hw_scales = bb.emit(relax.op.strided_slice(as_tensor(bb, scales, _F32), axes=[0], begin=[2], end=[4]))
    else:
        raise ValueError("Resize needs scales or sizes")
    hw = bb.emit(relax.op.strided_slice(size, axes=[0], begin=[2], end=[4]))
    return ops.resize2d(
        bb, data, hw, layout="NCHW", method=str_attr(attrs.get("mode"), "nearest"),
        coordinate_transformation_mode=str_attr(attrs.get("coordinate_transformation_mode"), "half_pixel"),
        rounding_method=str_attr(attrs.get("nearest_mode"), "round_prefer_floor"),
        cubic_alpha=float(attrs.get("cubic_coeff_a", -0.75)), cubic_exclude=int(attrs.get("exclude_outside", 0)),
        scales=hw_scales)


def _shape_f32(bb, data):
    return bb.emit(relax.op.astype(bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(data)))), _F32))


def _scaled_sizes(bb, data, scales):
    """ONNX: output = floor(input * scale), per axis."""
    scaled = relax.op.floor(relax.op.multiply(_shape_f32(bb, data), as_tensor(bb, scales, _F32)))
    return bb.emit(relax.op.astype(bb.emit(scaled), "int64"))


def _keep_aspect_ratio(bb, data, sizes, axes, policy: str):
    """Resize's sizes under ``keep_aspect_ratio_policy`` "not_larger" or
    "not_smaller": one scale for ``axes``, the smallest (largest) of the
    sizes' ratios, the sizes ``in * scale`` rounded half up; returns the
    sizes and every axis' scale (coordinates map through them)."""
    if policy not in ("not_larger", "not_smaller"):
        raise ValueError(f"keep_aspect_ratio_policy {policy!r} is not one of stretch, not_larger, not_smaller")
    rank = ndim_of(data)
    shape = _shape_f32(bb, data)
    ratios = bb.emit(relax.op.divide(bb.emit(relax.op.astype(sizes, _F32)), shape))
    chosen = bb.emit(relax.op.take(ratios, relax.const(np.array(axes, np.int64), "int64"), axis=0))
    scale = bb.emit((relax.op.min if policy == "not_larger" else relax.op.max)(chosen))
    mask = relax.const(np.array([a in axes for a in range(rank)]), "bool")
    scales = bb.emit(relax.op.where(mask, scale, relax.const(1.0, _F32)))
    rounded = bb.emit(relax.op.floor(bb.emit(relax.op.add(bb.emit(relax.op.multiply(shape, scales)),
                                                           relax.const(0.5, _F32)))))
    size = bb.emit(relax.op.astype(bb.emit(relax.op.where(mask, rounded, shape)), "int64"))
    return size, scales


def _resize_all_axes(importer, data, values, axes, default):
    """Resize's sizes or scales given for ``axes`` only, for every axis: the
    others keep their size (``default`` "shape") or a scale of 1."""
    if absent(importer, values):
        return values
    bb = importer.bb
    rank = ndim_of(data)
    axes = [a % rank for a in axes]
    given = as_tensor(bb, values, "int64" if default == "shape" else _F32)
    if default == "shape":
        kept = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(data))))
    else:
        kept = relax.const(np.ones(rank, np.float32), _F32)
    pick = [rank + axes.index(a) if a in axes else a for a in range(rank)]
    both = bb.emit(relax.op.concat([kept, given], axis=0))
    return bb.emit(relax.op.take(both, relax.const(np.array(pick, np.int64), "int64"), axis=0))


def _resize_by_axis(importer, data, roi, scales, sizes, attrs, antialias: bool):
    """Resize as ONNX's reference computes it, one axis after another (in
    ``axes`` order): each output element is the weighted sum of taps along
    the axis (clamped to its edges), ``tf_crop_and_resize``'s coordinates
    outside the input are ``extrapolation_value``. Axes whose size, scale
    and region are known to stay as they are are left out."""
    bb = importer.bb
    rank = ndim_of(data)
    dtype = str(data.ty.dtype)
    mode = str_attr(attrs.get("mode"), "nearest")
    coordinates = str_attr(attrs.get("coordinate_transformation_mode"), "half_pixel")
    policy = str_attr(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if mode not in ("nearest", "linear", "cubic"):
        raise ValueError(f"mode {mode!r} is not one of nearest, linear, cubic")
    if mode != "nearest" and dtype not in _FLOATS:
        raise UnsupportedOnnxOp(f"Resize {mode} of {dtype} data with antialias or tf_crop_and_resize is not "
                                "supported (only floating-point data)", {"Resize": []})
    given_sizes = not absent(importer, sizes)
    if coordinates == "tf_crop_and_resize" and not given_sizes:
        raise UnsupportedOnnxOp("Resize with coordinate_transformation_mode tf_crop_and_resize and scales (not "
                                "sizes) is not supported: ONNX's spec (the region's length times the scale) and "
                                "its reference (the input's length times the scale) give different output sizes",
                                {"Resize": []})
    if not given_sizes and absent(importer, scales):
        raise ValueError("Resize needs scales or sizes")
    axes = [int(a) % rank for a in attrs.get("axes", range(rank))]
    shape = _shape_f32(bb, data)
    if given_sizes:
        full = _resize_all_axes(importer, data, sizes, axes, "shape") if "axes" in attrs else sizes
        size = as_tensor(bb, full, "int64")
        if policy != "stretch":
            size, scale = _keep_aspect_ratio(bb, data, size, axes, policy)
        else:
            scale = bb.emit(relax.op.divide(bb.emit(relax.op.astype(size, _F32)), shape))
    else:
        full = _resize_all_axes(importer, data, scales, axes, 1.0) if "axes" in attrs else scales
        scale = as_tensor(bb, full, _F32)
        size = _scaled_sizes(bb, data, scale)
    starts, ends = _roi(importer, roi, rank, axes, coordinates)
    known = _known_sizes(importer, data, None if policy != "stretch" else sizes if given_sizes else scales, axes,
                         given_sizes)
    compute = "float64" if dtype == "float64" else _F32 if mode != "nearest" else dtype
    result = data if compute == dtype else bb.emit(relax.op.astype(data, compute))
    extrapolation = relax.const(float(attrs.get("extrapolation_value", 0.0)), compute)
    for axis in axes:
        out = known[axis]
        if out is not None and out == _static_dim(data, axis) and (
                coordinates != "tf_crop_and_resize" or _is_whole(importer, roi, axis, axes)):
            continue
        pick = relax.const(axis, "int64")
        axis_values = [bb.emit(relax.op.take(v, pick, axis=0)) for v in (size, scale, shape)]
        region = [bb.emit(relax.op.take(v, pick, axis=0)) for v in (starts, ends)] if starts is not None else None
        x, outside = _source_coordinates(bb, out, *axis_values, coordinates, given_sizes, region)
        result = _interpolate_axis(bb, result, axis, x, axis_values[1], axis_values[2], mode, attrs, antialias)
        if outside is not None:
            mask = outside if axis == rank - 1 else bb.emit(relax.op.expand_dims(outside, list(range(1, rank - axis))))
            result = bb.emit(relax.op.where(mask, extrapolation, result))
    return result if compute == dtype else bb.emit(relax.op.astype(result, dtype))


def _static_dim(data, axis) -> int | None:
    """The size of ``data``'s ``axis`` if it is a literal."""
    dim = data.ty.shape.values[axis] if data.ty.shape is not None else None
    return int(dim) if dim is not None and hasattr(dim, "value") else None


def _known_sizes(importer, data, values, axes, from_sizes: bool) -> list:
    """Each axis' output size where it is known at import time (None where
    not): the axes Resize leaves, and those the constant sizes or scales
    give (scales where the input's size is static)."""
    rank = ndim_of(data)
    known = [_static_dim(data, a) if a not in axes else None for a in range(rank)]
    value = None if values is None else const_value(importer, values)
    if value is None or value.size != len(axes):
        return known
    for a, v in zip(axes, value.tolist()):
        dim = _static_dim(data, a)
        if from_sizes:
            known[a] = int(v)
        elif dim is not None and np.float32(v) == 1:
            known[a] = dim
        elif dim is not None:
            # (a scale other than 1 resamples even where the size stays: only a size that changes counts)
            changed = int(np.floor(np.float32(dim) * np.float32(v)))
            known[a] = changed if changed != dim else None
    return known


def _roi(importer, roi, rank, axes, coordinates):
    """tf_crop_and_resize's region as start and end vectors over every axis
    (0 and 1 for axes the region leaves out, and where there is no roi)."""
    if coordinates != "tf_crop_and_resize":
        return None, None
    bb = importer.bb
    if absent(importer, roi):
        return relax.const(np.zeros(rank, np.float32), _F32), relax.const(np.ones(rank, np.float32), _F32)
    given = as_tensor(bb, roi, _F32)
    n = len(axes)
    defaults = relax.const(np.concatenate([np.zeros(rank), np.ones(rank)]).astype(np.float32), _F32)
    both = bb.emit(relax.op.concat([defaults, given], axis=0))
    vectors = []
    for half in (0, 1):
        pick = [2 * rank + half * n + axes.index(a) if a in axes else half * rank + a for a in range(rank)]
        vectors.append(bb.emit(relax.op.take(both, relax.const(np.array(pick, np.int64), "int64"), axis=0)))
    return vectors


def _is_whole(importer, roi, axis, axes) -> bool:
    """Whether the region is known to span the whole of ``axis``."""
    if absent(importer, roi):
        return True
    value = const_value(importer, roi)
    if value is None or value.size != 2 * len(axes):
        return False
    i = axes.index(axis)
    return float(value[i]) == 0.0 and float(value[len(axes) + i]) == 1.0


def _f32(value: float):
    return relax.const(value, _F32)


def _source_coordinates(bb, out: int | None, size, scale, length, coordinates: str, given_sizes: bool, region):
    """Where each output element of an axis samples the input (float32, in
    input pixels), as ONNX's reference maps it: through the scale (the
    sizes' ratio where sizes are given), the output's length ``size``
    (``out`` where known at import time), the input's ``length``. Also,
    for tf_crop_and_resize, which elements fall outside the input."""
    op = relax.op
    if out is not None:
        steps = bb.emit(op.arange(0, out, 1, "int64"))
    else:
        steps = ops.arange(bb, relax.const(0, "int64"), size, relax.const(1, "int64"), "int64")
    y = bb.emit(op.astype(steps, _F32))
    out_f = bb.emit(op.astype(size, _F32))
    one_out = op.equal(size, relax.const(1, "int64"))
    half = op.subtract(op.divide(op.add(y, _f32(0.5)), scale), _f32(0.5))
    if coordinates == "half_pixel":
        x = half
    elif coordinates == "asymmetric":
        x = op.divide(y, scale)
    elif coordinates == "pytorch_half_pixel":
        # (0 for one output element, as the spec and onnxruntime map it; ONNX's reference takes -0.5 where
        # the scaled length is exactly 1)
        x = op.where(one_out, _f32(0.0), half)
    elif coordinates == "tf_half_pixel_for_nn":
        x = op.divide(op.add(y, _f32(0.5)), scale)
    elif coordinates == "half_pixel_symmetric":
        scaled = out_f if given_sizes else op.multiply(length, scale)
        offset = op.multiply(op.multiply(length, _f32(0.5)), op.subtract(_f32(1.0), op.divide(out_f, scaled)))
        x = op.add(offset, half)
    elif coordinates == "align_corners":
        scaled = out_f if given_sizes else op.multiply(length, scale)
        x = op.where(one_out, _f32(0.0),
                     op.divide(op.multiply(y, op.subtract(length, _f32(1.0))), op.subtract(scaled, _f32(1.0))))
    elif coordinates == "tf_crop_and_resize":
        start, end = region
        last = op.subtract(length, _f32(1.0))
        spread = op.divide(op.multiply(op.multiply(y, op.subtract(end, start)), last),
                           op.subtract(out_f, _f32(1.0)))
        x = op.where(one_out, op.multiply(op.multiply(op.add(start, end), _f32(0.5)), last),
                     op.add(spread, op.multiply(start, last)))
        x = bb.emit(x)
        outside = bb.emit(op.logical_or(op.less(x, _f32(0.0)), op.greater(x, last)))
        return x, outside
    else:
        raise ValueError(f"coordinate_transformation_mode {coordinates!r} is not one of ONNX's")
    return bb.emit(x), None


def _filter(distance, mode: str, alpha: float):
    """The interpolation filter's weight at ``distance`` (input pixels):
    the triangle for linear, Keys' cubic with ``a = alpha`` for cubic."""
    op = relax.op
    d = op.abs(distance)
    if mode == "linear":
        return op.maximum(op.subtract(_f32(1.0), d), _f32(0.0))
    a = _f32(alpha)
    d2 = op.multiply(d, d)
    d3 = op.multiply(d2, d)
    near = op.add(op.subtract(op.multiply(op.add(a, _f32(2.0)), d3), op.multiply(op.add(a, _f32(3.0)), d2)),
                  _f32(1.0))
    far = op.subtract(op.add(op.subtract(op.multiply(a, d3), op.multiply(op.multiply(a, _f32(5.0)), d2)),
                             op.multiply(op.multiply(a, _f32(8.0)), d)), op.multiply(a, _f32(4.0)))
    return op.where(op.less_equal(d, _f32(1.0)), near, op.where(op.less(d, _f32(2.0)), far, _f32(0.0)))


def _nearest(x, rounding: str):
    """The nearest input pixel to ``x`` as ONNX's reference picks it."""
    op = relax.op
    if rounding == "round_prefer_floor":
        return op.ceil(op.subtract(x, _f32(0.5)))
    if rounding == "round_prefer_ceil":
        return op.floor(op.add(x, _f32(0.5)))
    if rounding == "floor":
        return op.floor(x)
    if rounding == "ceil":
        return op.ceil(x)
    raise ValueError(f"nearest_mode {rounding!r} is not one of round_prefer_floor, round_prefer_ceil, floor, ceil")


def _interpolate_axis(bb, data, axis: int, x, scale, length, mode: str, attrs, antialias: bool):
    """``data`` resampled along ``axis`` at input coordinates ``x``. Linear
    and cubic take the taps within the filter's reach of ``floor(x)``: with
    ``antialias`` and a scale below 1 the filter is widened by ``1 / scale``
    (as many taps, a number known at run time) and its weights normalized.
    Taps past the edges read the edge pixels; ``exclude_outside`` drops
    them instead. A tap of weight 0 adds nothing (its pixel may be inf)."""
    op = relax.op
    rank = ndim_of(data)
    last = op.astype(op.subtract(length, _f32(1.0)), "int64")
    if mode == "nearest":
        index = op.astype(_nearest(x, str_attr(attrs.get("nearest_mode"), "round_prefer_floor")), "int64")
        index = bb.emit(op.minimum(op.maximum(index, relax.const(0, "int64")), last))
        return bb.emit(op.take(data, index, axis=axis))
    support = _SUPPORT[mode]
    base = bb.emit(op.floor(x))
    if antialias:
        # (a scale below 1 / length leaves no output, and bounds the taps where the scale is 0)
        least = op.divide(_f32(1.0), op.maximum(length, _f32(1.0)))
        shrink = bb.emit(op.maximum(op.minimum(scale, _f32(1.0)), least))
        first = bb.emit(op.add(op.floor(op.divide(_f32(-support), shrink)), _f32(1.0)))
        count = bb.emit(op.astype(op.subtract(_f32(2.0), op.multiply(first, _f32(2.0))), "int64"))
        taps = ops.arange(bb, relax.const(0, "int64"), count, relax.const(1, "int64"), "int64")
        offsets = bb.emit(op.add(op.astype(taps, _F32), first))
    else:
        shrink = None
        offsets = relax.const(np.arange(1 - support, support + 1, dtype=np.float32), _F32)
    positions = bb.emit(op.add(op.expand_dims(base, 1), op.expand_dims(offsets, 0)))
    distance = op.subtract(positions, op.expand_dims(x, 1))
    if shrink is not None:
        distance = op.multiply(distance, shrink)
    weights = bb.emit(_filter(distance, mode, float(attrs.get("cubic_coeff_a", -0.75))))
    exclude = int(attrs.get("exclude_outside", 0))
    if exclude:
        inside = op.logical_and(op.greater_equal(positions, _f32(0.0)), op.less_equal(positions, op.astype(last, _F32)))
        weights = bb.emit(op.where(inside, weights, _f32(0.0)))
    if antialias or exclude:
        weights = bb.emit(op.divide(weights, op.sum(weights, axis=1, keepdims=True)))
    index = bb.emit(op.minimum(op.maximum(op.astype(positions, "int64"), relax.const(0, "int64")), last))
    taken = bb.emit(op.take(data, index, axis=axis))
    dtype = str(data.ty.dtype)
    if dtype != _F32:
        weights = bb.emit(op.astype(weights, dtype))
    if rank - axis - 1:
        weights = bb.emit(op.expand_dims(weights, list(range(2, rank - axis + 1))))
    zero = relax.const(0.0, dtype)
    terms = op.where(op.equal(weights, zero), zero, op.multiply(taken, weights))
    return bb.emit(op.sum(terms, axis=axis + 1))
