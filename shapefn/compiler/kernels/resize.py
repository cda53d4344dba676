"""2-D resize (ONNX Resize / Relax ``image.resize2d``) to output sizes known
only at run time: nearest, linear and cubic, in the coordinate modes ONNX
defines."""
from __future__ import annotations

from collections.abc import Sequence

from tvm import te, tirx

from .tir_builder import i64, sizes

_F32 = "float32"
_METHODS = {"nearest": "nearest", "nearest_neighbor": "nearest", "linear": "linear",
            "bilinear": "linear", "cubic": "cubic"}
_COORDINATE_MODES = ("half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
                     "align_corners", "half_pixel_symmetric")
_ROUNDING = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "round")


def _f32(value):
    return tirx.Cast(_F32, value) if not isinstance(value, float) else tirx.const(value, _F32)


def _index_f32(index):
    """A non-negative index as float32. The ``fabs`` is an identity that
    keeps TVM from failing to build: when float arithmetic mixes a cast loop
    index with another cast integer and common-subexpression elimination
    binds it, ``LowerIntrin``'s bound analysis builds a float ``IntImm`` and
    aborts ("IntImm supports only int or uint or bool type")."""
    return tirx.abs(_f32(index))


def _source_coordinate(x, in_len, out_len, mode: str, scale=None):
    """Where output pixel ``x`` samples the input, in float32 exactly as
    onnxruntime computes it (dividing by the scale ``out / in``, or by
    ``scale`` where the model gives it: ONNX maps through the scale, and
    ``out`` is ``in * scale`` rounded down); the identity when the size
    does not change."""
    xf, in_f = _index_f32(x), _f32(in_len)
    out_f = _f32(out_len) if scale is None else in_f * scale
    scale = out_f / in_f if scale is None else scale
    half, one = _f32(0.5), _f32(1.0)
    if mode == "half_pixel":
        coord = (xf + half) / scale - half
    elif mode == "asymmetric":
        coord = xf / scale
    elif mode == "pytorch_half_pixel":
        coord = tirx.Select(out_len > 1, (xf + half) / scale - half, _f32(0.0))
    elif mode == "tf_half_pixel_for_nn":
        coord = (xf + half) / scale
    elif mode == "half_pixel_symmetric":  # half_pixel about the centre when out is in * scale rounded down
        offset = in_f * half * (one - _f32(out_len) / out_f)
        coord = offset + (xf + half) / scale - half
    else:  # align_corners
        coord = tirx.Select(out_len == 1, _f32(0.0), xf * (in_f - one) / (out_f - one))
    return tirx.Select(in_len == out_len if scale is None else scale == one, xf, coord)


def _nearest_index(coord, in_len, rounding: str):
    """onnxruntime's nearest pixel (``std::round`` rounds halves away from
    zero, TIR ``round`` to even, so halves are handled explicitly)."""
    is_half = coord == tirx.Cast(_F32, tirx.Cast("int64", coord)) + _f32(0.5)
    if rounding == "round_prefer_floor":
        index = tirx.Select(is_half, tirx.floor(coord), tirx.round(coord))
    elif rounding == "round_prefer_ceil":
        index = tirx.Select(is_half, tirx.ceil(coord), tirx.round(coord))
    elif rounding == "floor":
        index = tirx.floor(coord)
    elif rounding == "ceil":
        index = tirx.ceil(coord)
    else:  # "round", Relax's default: half to even
        index = tirx.round(coord)
    return tirx.min(tirx.max(tirx.Cast("int64", index), i64(0)), in_len - 1)


def _linear_taps(coord, in_len):
    """Two input positions and their weights, as onnxruntime's bilinear setup."""
    coord = tirx.max(_f32(0.0), tirx.min(coord, _f32(in_len - 1)))
    lo = tirx.min(tirx.Cast("int64", coord), in_len - 1)
    hi = tirx.min(lo + 1, in_len - 1)
    same = lo == hi
    w_lo = tirx.Select(same, _f32(0.5), tirx.abs(coord - _index_f32(hi)))  # weight of lo
    w_hi = tirx.Select(same, _f32(0.5), tirx.abs(coord - _index_f32(lo)))
    return [(lo, w_lo), (hi, w_hi)]


def _cubic_taps(coord, in_len, alpha: float, exclude_outside: bool):
    """Four input positions (clamped) and their Keys-cubic weights."""
    base = tirx.Cast("int64", tirx.floor(coord))
    s = tirx.abs(coord - _f32(base))
    a = _f32(alpha)

    def outer(t):  # weights of the two outer taps, t = |distance| in [1, 2]
        return ((a * t - _f32(5.0) * a) * t + _f32(8.0) * a) * t - _f32(4.0) * a

    def inner(t):  # weights of the two inner taps, t in [0, 1]
        return ((a + _f32(2.0)) * t - (a + _f32(3.0))) * t * t + _f32(1.0)

    one, two = _f32(1.0), _f32(2.0)
    weights = [outer(s + one), inner(s), inner(one - s), outer(two - s)]
    positions = [base - 1 + i for i in range(4)]
    if exclude_outside:
        weights = [tirx.Select(tirx.all(p >= 0, p < in_len), w, _f32(0.0))
                   for p, w in zip(positions, weights, strict=True)]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [w / total for w in weights]
    clamped = [tirx.min(tirx.max(p, i64(0)), in_len - 1) for p in positions]
    return list(zip(clamped, weights, strict=True))


def check_resize(layout: str, method: str, coordinate_transformation_mode: str,
                  rounding_method: str) -> None:
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize2d: unsupported layout {layout!r}")
    if method not in _METHODS:
        raise ValueError(f"resize2d: unsupported method {method!r}")
    if coordinate_transformation_mode not in _COORDINATE_MODES:
        raise ValueError(f"resize2d: unsupported coordinate_transformation_mode "
                         f"{coordinate_transformation_mode!r}")
    if rounding_method not in _ROUNDING:
        raise ValueError(f"resize2d: unsupported rounding_method {rounding_method!r}")


def resize2d_te(data: te.Tensor, size: Sequence, layout: str, method: str,
                 coordinate_transformation_mode: str, rounding_method: str, cubic_alpha: float,
                 cubic_exclude: int, dtype: str, scales: te.Tensor | None = None) -> te.Tensor:
    """Resize of ``data`` to spatial ``size`` (height, width) as a TE
    compute; ``scales`` (float32 [2]: height, width), where given, map
    output to input coordinates."""
    method = _METHODS[method]
    h_axis, w_axis = (2, 3) if layout == "NCHW" else (1, 2)
    out_shape = list(data.shape)
    out_shape[h_axis], out_shape[w_axis] = size

    def taps(idx, axis):
        scale = None if scales is None else scales[0 if axis == h_axis else 1]
        coord = _source_coordinate(idx[axis], data.shape[axis], out_shape[axis],
                                   coordinate_transformation_mode, scale)
        if method == "nearest":
            return [(_nearest_index(coord, data.shape[axis], rounding_method), None)]
        if method == "linear":
            return _linear_taps(coord, data.shape[axis])
        return _cubic_taps(coord, data.shape[axis], cubic_alpha, bool(cubic_exclude))

    def compute(*idx):
        total = None
        for y, wy in taps(idx, h_axis):
            row = None
            for x, wx in taps(idx, w_axis):
                src = list(idx)
                src[h_axis], src[w_axis] = y, x
                value = data[tuple(src)]
                if wx is None:
                    return tirx.Cast(dtype, value)
                term = wx * _f32(value)
                row = term if row is None else row + term
            total = row * wy if total is None else total + row * wy
        return tirx.Cast(dtype, total)

    return te.compute(out_shape, compute, name="resize2d")


def resize2d(layout: str = "NCHW", method: str = "nearest",
             coordinate_transformation_mode: str = "half_pixel",
             rounding_method: str = "round_prefer_floor", cubic_alpha: float = -0.75,
             cubic_exclude: int = 0, extrapolation_value: float = 0.0,
             dtype: str = "float32", scaled: bool = False) -> tirx.PrimFunc:
    """ONNX Resize of a 4-D tensor to ``out``'s spatial size: ``(data, out)``,
    or with ``scaled`` ``(data, scales, out)``, ``scales`` float32 [2] (height,
    width) the model's scales, through which ONNX maps coordinates.

    Attributes take ONNX names and defaults (``method`` "nearest" / "linear" /
    "cubic", ``rounding_method`` is ONNX ``nearest_mode``, or "round" for
    TIR's round-half-to-even as Relax's default). The arithmetic follows
    onnxruntime's float32 formulas rather than ``topi.image.resize2d``, which
    multiplies by the inverse scale (a different nearest pixel at some sizes)
    and, with symbolic sizes, fails to build for linear/cubic with
    align_corners or asymmetric. ``extrapolation_value`` only matters for
    ``tf_crop_and_resize``, which needs a runtime ROI and is not supported.
    """
    del extrapolation_value
    check_resize(layout, method, coordinate_transformation_mode, rounding_method)
    data = te.placeholder(sizes("n", 4), dtype, name="data")
    scales = te.placeholder((i64(2),), _F32, name="scales") if scaled else None
    out = resize2d_te(data, (te.var("oh", "int64"), te.var("ow", "int64")), layout, method,
                       coordinate_transformation_mode, rounding_method, cubic_alpha,
                       cubic_exclude, dtype, scales)
    params = [data, scales, out] if scaled else [data, out]
    return te.create_prim_func(params).with_attr("global_symbol", "resize2d")
