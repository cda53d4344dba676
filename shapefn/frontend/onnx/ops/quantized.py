"""shapefn's ONNX converters for the quantized operators TVM's importer
lacks: ``QLinearMatMul``, ``QLinearConv`` and ``ConvInteger`` (int8 and
uint8): zero points subtracted and products accumulated in int32, the
requantization multiplier ``(a_scale * b_scale) / y_scale`` computed in
the scales' type (as ONNX's reference computes it), the accumulator times
it rounded half to even in float64, plus the output zero point, saturated.
Per-row (a) and per-column (b) quantization for ``QLinearMatMul``,
per-output-channel weights for the convolutions, whose SAME padding over
sizes known only at run time is computed then. And blocked
``QuantizeLinear`` / ``DequantizeLinear`` (opset 21+, ``block_size`` > 0;
TVM's converters take the other granularities): each scale and zero point
repeated along the axis, over extents known only at run time too; int8,
uint8, int16 and uint16 (and int32 to dequantize), float32 and float16."""
from __future__ import annotations

import functools

import numpy as np
import tvm
from onnx import TensorProto
from tvm import relax, sym

from ....compiler import ops
from ....runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp
from ..registry import converter, tvm_converter
from ..values import as_tensor, ndim_of, str_attr

_QUANTIZED = ("int8", "uint8")


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _refuse(op: str, what: str):
    raise UnsupportedOnnxOp(f"{op} {what} is not supported", {op: []})


def _optional(importer, inputs, i):
    """Input ``i`` as a tensor, None where absent (an empty name)."""
    return as_tensor(importer.bb, inputs[i]) if len(inputs) > i and inputs[i] is not None else None


def _single(value) -> bool:
    """A scalar or a tensor of one element, by sizes known at import."""
    shape = value.ty.shape
    if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return False
    return functools.reduce(lambda a, b: a * b, (int(d) for d in shape.values), 1) == 1


def _check_types(op: str, values: dict, allowed) -> None:
    for name, value in values.items():
        if value is not None and _dtype(value) not in allowed:
            _refuse(op, f"with {name} of type {_dtype(value)} (only {', '.join(allowed)})")


def _per_tensor(bb, op: str, name: str, value):
    """``value`` (a scale or zero point ONNX allows per tensor only) as a
    0-d tensor: a ``[1]`` one must not add an axis to the result."""
    if value is None:
        return None
    if not _single(value):
        _refuse(op, f"with {name} of shape {value.ty.shape} (per-tensor, one element, only)")
    return bb.normalize(relax.op.reshape(value, []))


def _widened(bb, value, zero_point):
    """``value - zero_point`` in int32 (exact for 8-bit operands)."""
    wide = bb.normalize(relax.op.astype(value, "int32"))
    if zero_point is None:
        return wide
    return bb.normalize(relax.op.subtract(wide, bb.normalize(relax.op.astype(zero_point, "int32"))))


def _multiplier(bb, scale_dtype: str, x_scale, w_scale, y_scale):
    """``x_scale * w_scale / y_scale`` rounded to the scales' type after
    each operation, as ONNX's reference (numpy) computes it, in float64.
    float16 is computed in float32 and rounded after each operation: the
    product of two halves is exact in float32, and a float32 quotient
    rounded to half is the correctly rounded half quotient (24 >= 2 * 11 + 2
    bits), so this is numpy's float16 arithmetic without half arithmetic on
    the device."""
    def rounded(expr):
        expr = bb.normalize(expr)
        if scale_dtype == "float32":
            return expr
        return bb.normalize(relax.op.astype(bb.normalize(relax.op.astype(expr, scale_dtype)), "float32"))

    if scale_dtype != "float32":
        x_scale, w_scale, y_scale = (bb.normalize(relax.op.astype(s, "float32")) for s in (x_scale, w_scale, y_scale))
    product = rounded(relax.op.multiply(x_scale, w_scale))
    return bb.normalize(relax.op.astype(rounded(relax.op.divide(product, y_scale)), "float64"))


def _requantized(bb, accumulator, multiplier, y_zero_point, out_dtype: str):
    """``saturate(round_half_even(acc * multiplier) + y_zero_point)``, as
    ONNX defines quantization and onnxruntime computes it (ONNX's reference
    adds the zero point before rounding: another result at exact halves
    with an odd zero point). In float64: the product of an int32 and a
    float32 or float16 multiplier is exact there while ``|acc| < 2**29``."""
    value = bb.normalize(relax.op.multiply(bb.normalize(relax.op.astype(accumulator, "float64")), multiplier))
    value = bb.normalize(relax.op.round(value))
    if y_zero_point is not None:
        value = bb.normalize(relax.op.add(value, bb.normalize(relax.op.astype(y_zero_point, "float64"))))
    info = np.iinfo(out_dtype)
    return relax.op.astype(bb.normalize(relax.op.clip(value, float(info.min), float(info.max))), out_dtype)


# ---- QLinearMatMul ----------------------------------------------------------------------------------
def _matmul_parameter(bb, op: str, name: str, value, rank: int, row: bool):
    """A scale or zero point of ``a`` (``row``) or ``b``, broadcastable to
    the product: per tensor (one element) a 0-d tensor; per row of ``a`` an
    ``[M]`` vector becomes ``[M, 1]``; per column of ``b`` ``[N]`` broadcasts
    as it is; ``[..., M, 1]`` and ``[..., 1, N]`` (the operand's rank) too."""
    if value is None:
        return None
    if _single(value):
        return bb.normalize(relax.op.reshape(value, []))
    ndim = value.ty.ndim
    if rank < 2 or ndim not in (1, rank):
        _refuse(op, f"with {name} of rank {ndim} for an operand of rank {rank} (one element, a vector per "
                    f"{'row' if row else 'column'}, or the operand's rank)")
    return bb.normalize(relax.op.expand_dims(value, -1)) if ndim == 1 and row else value


@converter("QLinearMatMul")
def qlinear_matmul(importer, inputs, attrs, opset):
    op, bb = "QLinearMatMul", importer.bb
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (_optional(importer, inputs, i) for i in range(8))
    _check_types(op, {"a": a, "b": b, "a_zero_point": a_zero, "b_zero_point": b_zero, "y_zero_point": y_zero},
                 _QUANTIZED)
    scale_dtype = _dtype(a_scale)
    _check_types(op, {"a_scale": a_scale, "b_scale": b_scale, "y_scale": y_scale}, ("float32", "float16"))
    if len({_dtype(s) for s in (a_scale, b_scale, y_scale)}) > 1:
        _refuse(op, "with scales of different types")
    a_rank, b_rank = ndim_of(a), ndim_of(b)
    a_zero, a_scale = (_matmul_parameter(bb, op, name, v, a_rank, True)
                       for name, v in (("a_zero_point", a_zero), ("a_scale", a_scale)))
    b_zero, b_scale = (_matmul_parameter(bb, op, name, v, b_rank, False)
                       for name, v in (("b_zero_point", b_zero), ("b_scale", b_scale)))
    y_scale, y_zero = _per_tensor(bb, op, "y_scale", y_scale), _per_tensor(bb, op, "y_zero_point", y_zero)
    accumulator = bb.normalize(relax.op.matmul(_widened(bb, a, a_zero), _widened(bb, b, b_zero), out_dtype="int32"))
    multiplier = _multiplier(bb, scale_dtype, a_scale, b_scale, y_scale)
    return _requantized(bb, accumulator, multiplier, y_zero, _dtype(y_zero) if y_zero is not None else _dtype(a))


# ---- convolutions -----------------------------------------------------------------------------------
def _channel_parameter(bb, op: str, name: str, value, ndim: int):
    """A per-tensor or per-output-channel weight parameter, broadcastable
    along axis 0 of a rank-``ndim`` tensor (the weights ``[M, C, k...]``;
    the output ``[N, M, ...]`` takes it with ``ndim - 1``)."""
    if value is None:
        return None
    if _single(value):
        return bb.normalize(relax.op.reshape(value, []))
    if value.ty.ndim != 1:
        _refuse(op, f"with {name} of rank {value.ty.ndim} (one element or one per output channel)")
    return bb.normalize(relax.op.expand_dims(value, list(range(1, ndim)))) if ndim > 1 else value


def _integer_conv(importer, op: str, x, x_zero, w, w_zero, bias, attrs, opset):
    """The int32 convolution of ``x - x_zero`` and ``w - w_zero`` plus the
    int32 ``bias``: padding the shifted input with 0 pads the input with its
    zero point, as ONNX defines it."""
    bb = importer.bb
    rank = ndim_of(x)
    if rank not in (3, 4, 5):
        _refuse(op, f"of rank-{rank} input (1-D, 2-D and 3-D convolutions only)")
    x_zero = _per_tensor(bb, op, "x_zero_point", x_zero)
    w_zero = _channel_parameter(bb, op, "w_zero_point", w_zero, ndim_of(w))
    data, attrs = _same_padded(bb, op, _widened(bb, x, x_zero), w, attrs)
    # (TVM's converter pops auto_pad from the attributes it is given)
    result = bb.normalize(tvm_converter(importer, "Conv", [data, _widened(bb, w, w_zero), None], dict(attrs),
                                        max(opset, 11)))
    if bias is not None:
        bias = bb.normalize(relax.op.astype(bias, "int32"))
        result = bb.normalize(relax.op.add(result, _channel_parameter(bb, op, "B", bias, rank - 1)))
    return result


def _same_padded(bb, op: str, data, weight, attrs):
    """``data`` padded as ONNX's SAME_UPPER / SAME_LOWER pads it, by amounts
    computed from sizes known only at run time (TVM's converter computes
    them at import), and the attributes without ``auto_pad``; otherwise
    ``data`` and ``attrs`` as they are. The total padding of an axis,
    ``(ceil(in / s) - 1) * s + window - in``, depends on ``in mod s``."""
    mode = str_attr(attrs.get("auto_pad"), "NOTSET")
    shape = data.ty.shape
    if mode not in ("SAME_UPPER", "SAME_LOWER") or (
            shape is not None and all(isinstance(d, tvm.tirx.IntImm) for d in shape.values[2:])):
        return data, attrs
    kernel = attrs.get("kernel_shape")
    if kernel is None and weight.ty.shape is not None \
            and all(isinstance(d, tvm.tirx.IntImm) for d in weight.ty.shape.values[2:]):
        kernel = [int(d) for d in weight.ty.shape.values[2:]]
    if shape is None or kernel is None:
        _refuse(op, f"with auto_pad {mode} and sizes of unknown rank or a kernel shape known only at run time")
    spatial = shape.values[2:]
    strides = attrs.get("strides", [1] * len(spatial))
    dilations = attrs.get("dilations", [1] * len(spatial))
    befores, afters = [], []
    for size, k, stride, dilation in zip(spatial, kernel, strides, dilations):
        total = tvm.tirx.max(((size + stride - 1) // stride - 1) * stride + (k - 1) * dilation + 1 - size, 0)
        befores.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
        afters.append(total - befores[-1])
    amounts = bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([0, 0, *befores, 0, 0, *afters])))
    attrs = {key: value for key, value in attrs.items() if key != "auto_pad"} | {"pads": [0] * 2 * len(spatial)}
    return ops.pad(bb, data, amounts), attrs


@converter("ConvInteger")
def conv_integer(importer, inputs, attrs, opset):
    op = "ConvInteger"
    x, w, x_zero, w_zero = (_optional(importer, inputs, i) for i in range(4))
    _check_types(op, {"x": x, "w": w, "x_zero_point": x_zero, "w_zero_point": w_zero}, _QUANTIZED)
    return _integer_conv(importer, op, x, x_zero, w, w_zero, None, attrs, opset)


@converter("QLinearConv")
def qlinear_conv(importer, inputs, attrs, opset):
    op, bb = "QLinearConv", importer.bb
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = (_optional(importer, inputs, i) for i in range(9))
    _check_types(op, {"x": x, "w": w, "x_zero_point": x_zero, "w_zero_point": w_zero, "y_zero_point": y_zero},
                 _QUANTIZED)
    _check_types(op, {"x_scale": x_scale, "w_scale": w_scale, "y_scale": y_scale}, ("float32",))
    _check_types(op, {"B": bias}, ("int32",))
    accumulator = _integer_conv(importer, op, x, x_zero, w, w_zero, bias, attrs, opset)
    scales = (_per_tensor(bb, op, "x_scale", x_scale), _channel_parameter(bb, op, "w_scale", w_scale, ndim_of(x) - 1),
              _per_tensor(bb, op, "y_scale", y_scale))
    y_zero = _per_tensor(bb, op, "y_zero_point", y_zero)
    return _requantized(bb, accumulator, _multiplier(bb, "float32", *scales), y_zero,
                        _dtype(y_zero) if y_zero is not None else _dtype(x))


# ---- QuantizeLinear / DequantizeLinear, blocked -------------------------------------------------------
_BLOCKED_TYPES = {TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.INT16: "int16",
                  TensorProto.UINT16: "uint16"}
_FLOATS = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}


def _onnx_type(op: str, what: str, code: int, allowed: dict) -> str:
    if code not in allowed:
        _refuse(op, f"with {what} {TensorProto.DataType.Name(code)} (only {', '.join(allowed.values())})")
    return allowed[code]


def _sizes(value) -> list:
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in value.ty.shape.values]


def _blocked_parameter(bb, op: str, name: str, value, x, axis: int, block: int):
    """A blocked scale or zero point (``x``'s rank, ``ceil(D / block)``
    along ``axis``) repeated ``block`` times along ``axis`` and cut to
    ``x``'s extent ``D`` there, in ``x``'s shape. One element: a 0-d
    tensor, as ONNX's reference takes it."""
    if value is None:
        return None
    if _single(value):
        return bb.normalize(relax.op.reshape(value, []))
    if value.ty.ndim != ndim_of(x):
        _refuse(op, f"blocked, with {name} of rank {value.ty.ndim} for an input of rank {ndim_of(x)}")
    dims = x.ty.shape.values
    sizes = list(value.ty.shape.values) if value.ty.shape is not None else [None] * len(dims)
    sizes[axis] = sizes[axis] * block if sizes[axis] is not None else None
    for i, (size, dim) in enumerate(zip(sizes, dims)):
        if isinstance(size, tvm.tirx.IntImm) and isinstance(dim, tvm.tirx.IntImm) \
                and (int(size) < int(dim) if i == axis else int(size) != int(dim)):
            raise InvalidOnnxModel(f"{op}: {name} of shape {_sizes(value)} does not block an input of shape "
                                   f"{_sizes(x)} (blocks of {block} along axis {axis})")
    if isinstance(sizes[axis], tvm.tirx.IntImm) and isinstance(dims[axis], tvm.tirx.IntImm):
        value = bb.normalize(relax.op.repeat(value, block, axis))
        value = bb.normalize(relax.op.strided_slice(value, axes=[axis], begin=[0], end=[dims[axis]]))
        sizes[axis] = dims[axis]
    # Sizes equal only at run time: each element's block (or element) by
    # index. A slice of the repeated blocks to D has sizes min(D, block * S)
    # that crash TVM's ConvertToDataflow once cast to D, and TVM's
    # CanonicalizeBindings drops a cast between sizes already defined. The
    # indices clipped: too few blocks reuse the last, where ONNX refuses them.
    analyzer = sym.Analyzer()
    for i, (size, dim) in enumerate(zip(sizes, dims)):
        if size is None or not analyzer.can_prove_equal(size, dim):
            index = bb.normalize(relax.op.arange(0, dim, 1, "int64"))
            if i == axis:
                index = bb.normalize(relax.op.floor_divide(index, relax.const(block, "int64")))
            value = bb.normalize(relax.op.take(value, index, axis=i, mode="clip"))
    return value


def _blocked_axis(op: str, x, attrs) -> tuple[int, int]:
    """The block size and the (non-negative) axis, for an ``x`` of sizes
    known at least symbolically."""
    if x.ty.shape is None:
        _refuse(op, "blocked, of an input of unknown sizes")
    rank, axis, block = ndim_of(x), int(attrs.get("axis", 1)), int(attrs["block_size"])
    if not -rank <= axis < rank or block < 0:
        _refuse(op, f"blocked, with axis {axis} and block_size {block} for an input of rank {rank}")
    return block, axis % rank


def _to_float32(bb, value, dtype: str | None = None):
    """``value`` in float32, rounded to ``dtype`` (float16) on the way."""
    if dtype is not None and _dtype(value) != dtype:
        value = bb.normalize(relax.op.astype(value, dtype))
    return bb.normalize(relax.op.astype(value, "float32")) if _dtype(value) != "float32" else value


@converter("QuantizeLinear")
def quantize_linear(importer, inputs, attrs, opset):
    """Blocked quantization (``block_size`` > 0); TVM's converter takes the
    rest. ``x / y_scale`` in the scale's type (or ``precision``'s), ``x``
    converted to it first, as the schema defines it and onnxruntime
    computes it (ONNX's reference divides a float32 ``x`` by float16 scales
    in float32): float16 computed in float32 and rounded to half, the
    correctly rounded half quotient (see ``_multiplier``). Then rounded half
    to even, plus the zero point, saturated, as both compute it."""
    if not int(attrs.get("block_size", 0) or 0):
        return NotImplemented
    op, bb = "QuantizeLinear", importer.bb
    x, scale, zero = (_optional(importer, inputs, i) for i in range(3))
    _check_types(op, {"x": x, "y_scale": scale}, ("float32", "float16"))
    block, axis = _blocked_axis(op, x, attrs)
    out_dtype = _dtype(zero) if zero is not None else "uint8"
    if attrs.get("output_dtype"):
        out_dtype = _onnx_type(op, "output_dtype", int(attrs["output_dtype"]), _BLOCKED_TYPES)
        if zero is not None and _dtype(zero) != out_dtype:
            _refuse(op, f"with output_dtype {out_dtype} and a zero point of type {_dtype(zero)}")
    _check_types(op, {"y_zero_point": zero}, tuple(_BLOCKED_TYPES.values()))
    precision = _dtype(scale)
    if attrs.get("precision"):
        precision = _onnx_type(op, "precision", int(attrs["precision"]), _FLOATS)
    scale, zero = (_blocked_parameter(bb, op, name, v, x, axis, block)
                   for name, v in (("y_scale", scale), ("y_zero_point", zero)))
    quotient = relax.op.divide(_to_float32(bb, x, precision), _to_float32(bb, scale, precision))
    value = bb.normalize(relax.op.round(_to_float32(bb, bb.normalize(quotient), precision)))
    if zero is not None:
        # (exact: both are integers, and a sum beyond 2**24 saturates)
        value = bb.normalize(relax.op.add(value, _to_float32(bb, zero)))
    info = np.iinfo(out_dtype)
    return relax.op.astype(bb.normalize(relax.op.clip(value, float(info.min), float(info.max))), out_dtype)


@converter("DequantizeLinear")
def dequantize_linear(importer, inputs, attrs, opset):
    """Blocked dequantization (``block_size`` > 0); TVM's converter takes
    the rest. ``(x - x_zero_point) * x_scale`` in float32 then converted to
    the output type, as ONNX's reference computes it (for 8-bit ``x`` and
    float16 scales an exact product, so rounded once to half it is what
    half arithmetic gives too)."""
    if not int(attrs.get("block_size", 0) or 0):
        return NotImplemented
    op, bb = "DequantizeLinear", importer.bb
    x, scale, zero = (_optional(importer, inputs, i) for i in range(3))
    _check_types(op, {"x": x, "x_zero_point": zero}, (*_BLOCKED_TYPES.values(), "int32"))
    if zero is not None and _dtype(zero) != _dtype(x):
        _refuse(op, f"with x of type {_dtype(x)} and a zero point of type {_dtype(zero)}")
    _check_types(op, {"x_scale": scale}, ("float32", "float16"))
    out_dtype = _dtype(scale)
    if attrs.get("output_dtype"):
        out_dtype = _onnx_type(op, "output_dtype", int(attrs["output_dtype"]), _FLOATS)
    block, axis = _blocked_axis(op, x, attrs)
    scale, zero = (_blocked_parameter(bb, op, name, v, x, axis, block)
                   for name, v in (("x_scale", scale), ("x_zero_point", zero)))
    value = _to_float32(bb, x)
    if zero is not None:
        value = bb.normalize(relax.op.subtract(value, _to_float32(bb, zero)))
    value = bb.normalize(relax.op.multiply(value, _to_float32(bb, scale)))
    return relax.op.astype(value, out_dtype) if out_dtype != "float32" else value
