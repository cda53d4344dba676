"""shapefn's ONNX converters for elementwise operators whose edge cases
TVM's converters get wrong (each found by ONNX's conformance suite):
shifts by the type's width or more, ``IsInf``'s sign flags, ``Mod`` by an
infinity, ``Pow`` of integers, ``Dropout``'s mask type and training mode,
``Elu`` of half-precision data, ``EyeLike`` of another type than its input,
``BitCast``, ``Clip`` keeping NaN; and ``Min``, ``Max`` and ``Equal`` on sizes
equal or 1 only at run time, where TVM's converters decide at import time."""
from __future__ import annotations

import numpy as np
import onnx
import tvm
import tvm_ffi
from tvm import relax, te, tirx

from ....runtime.errors import UnsupportedOnnxOp
from ..registry import converter, tvm_converter
from ..values import as_tensor, const_value, shape_values, str_attr


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _scalar(value, dtype: str) -> relax.Constant:
    return relax.const(np.array(value, dtype), dtype)


@converter("BitShift")
def bit_shift(importer, inputs, attrs, opset):
    """``x << y`` or ``x >> y`` as ONNX defines them for every shift: a
    shift by a negative amount or by the type's width or more gives 0, or
    -1 for a right shift of a negative value (every bit the sign bit), as
    NumPy; the hardware's shift masks the amount instead."""
    bb = importer.bb
    x, y = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    dtype = _dtype(x)
    bits = np.dtype(dtype).itemsize * 8
    in_range = bb.normalize(relax.op.logical_and(relax.op.greater_equal(y, _scalar(0, dtype)),
                                                 relax.op.less(y, _scalar(bits, dtype))))
    amount = bb.normalize(relax.op.where(in_range, y, _scalar(0, dtype)))
    if str_attr(attrs.get("direction"), "LEFT").upper() == "LEFT":
        shifted, beyond = relax.op.left_shift(x, amount), _scalar(0, dtype)
    else:
        shifted = relax.op.right_shift(x, amount)
        beyond = _scalar(0, dtype) if dtype.startswith("uint") else \
            relax.op.where(relax.op.less(x, _scalar(0, dtype)), _scalar(-1, dtype), _scalar(0, dtype))
    return relax.op.where(in_range, bb.normalize(shifted), bb.normalize(beyond))


@converter("IsInf")
def is_inf(importer, inputs, attrs, opset):
    """Infinities of the signs ``detect_positive`` and ``detect_negative``
    ask for (TVM's converter ignores both)."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    positive, negative = int(attrs.get("detect_positive", 1)), int(attrs.get("detect_negative", 1))
    result = bb.normalize(relax.op.isinf(x))
    if positive and negative:
        return result
    if not positive and not negative:
        return relax.op.zeros_like(result)
    zero = _scalar(0, _dtype(x))
    side = relax.op.greater(x, zero) if positive else relax.op.less(x, zero)
    return relax.op.logical_and(result, bb.normalize(side))


@converter("Mod")
def mod(importer, inputs, attrs, opset):
    """Floating-point ``Mod`` with ``fmod=0`` (NumPy's ``mod``, the sign of
    the divisor) by an infinite divisor: a finite ``x`` itself when it is 0
    or has the divisor's sign, else the divisor (TVM's ``x - floor(x / y) *
    y`` gives NaN). Other cases are TVM's converter's."""
    bb = importer.bb
    x, y = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    dtype = _dtype(x)
    if int(attrs.get("fmod", 0)) or "float" not in dtype:
        return NotImplemented
    zero = _scalar(0, dtype)
    remainder = bb.normalize(relax.op.floor_mod(x, y))
    same_side = relax.op.logical_or(relax.op.equal(x, zero), relax.op.greater(relax.op.multiply(x, y), zero))
    by_infinity = bb.normalize(relax.op.where(bb.normalize(same_side), x, y))
    infinite = bb.normalize(relax.op.logical_and(relax.op.isinf(y), relax.op.isfinite(x)))
    return relax.op.where(infinite, by_infinity, remainder)


@converter("Pow")
def power(importer, inputs, attrs, opset):
    """``Pow`` with the result in the base's type, as ONNX defines it (TVM's
    power takes two floats of one type): a float base raised to an exponent
    of any type cast to it; an integer base computed in float64, exact
    while the result is below 2**53, then rounded to the base's type."""
    bb = importer.bb
    x, y = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    dtype = _dtype(x)
    if "float" in dtype:
        return relax.op.power(x, y if _dtype(y) == dtype else bb.normalize(relax.op.astype(y, dtype)))
    wide = relax.op.power(bb.normalize(relax.op.astype(x, "float64")), bb.normalize(relax.op.astype(y, "float64")))
    return relax.op.astype(bb.normalize(relax.op.round(bb.normalize(wide))), dtype)


@converter("Dropout")
def dropout(importer, inputs, attrs, opset):
    """Dropout: its input and an all-true boolean mask in inference (TVM's
    converter gives a float mask). In training mode (``training_mode`` true,
    or given at run time) with a ``seed``, each element is kept where a
    hash of the seed and its index, as a number in [0, 1), is at least the
    ratio, and scaled by ``1 / (1 - ratio)``: the same elements drop on
    every call and every device. Without a seed, ONNX asks for a random
    mask, which shapefn does not draw: refused, unless the ratio is 0."""
    bb = importer.bb
    data = as_tensor(bb, inputs[0])
    training = inputs[2] if opset >= 12 and len(inputs) > 2 and inputs[2] is not None else None
    trained = const_value(importer, training) if training is not None else np.array(False)
    if trained is not None and not bool(np.asarray(trained).reshape(-1)[0]):
        return relax.Tuple([data, bb.normalize(relax.op.ones_like(data, "bool"))])
    ratio = inputs[1] if len(inputs) > 1 and inputs[1] is not None else relax.const(0.5, _dtype(data))
    if "seed" not in attrs:
        known = const_value(importer, ratio)
        if known is None or float(np.asarray(known).reshape(-1)[0]) != 0.0:
            raise UnsupportedOnnxOp("Dropout in training mode without a seed (training_mode true or given at run "
                                    "time, a ratio other than 0) drops elements at random; shapefn drops them "
                                    "by the seed attribute only", {"Dropout": []})
    dtype = _dtype(data)
    ratio = bb.emit(relax.op.astype(relax.op.reshape(as_tensor(bb, ratio), []), "float32"))
    uniform = _seeded_uniform(bb, data, int(attrs.get("seed", 0)))
    keep = relax.op.greater_equal(uniform, ratio)
    if training is not None and trained is None:
        keep = relax.op.logical_or(keep, relax.op.logical_not(relax.op.reshape(as_tensor(bb, training), [])))
    keep = bb.emit(keep)
    scale = relax.op.divide(relax.const(1.0, "float32"), relax.op.subtract(relax.const(1.0, "float32"), ratio))
    if training is not None and trained is None:
        scale = relax.op.where(relax.op.reshape(as_tensor(bb, training), []), scale, relax.const(1.0, "float32"))
    scaled = relax.op.multiply(data, relax.op.astype(scale, dtype))
    return relax.Tuple([bb.emit(relax.op.where(keep, scaled, relax.const(0, dtype))), keep])


def _seeded_uniform(bb, like, seed: int):
    """A float32 in [0, 1) per element of ``like``: 24 bits of a 32-bit
    integer hash (two multiply-xorshift rounds) of the element's flat
    index mixed with ``seed``."""
    ty = like.ty
    count = 1
    for d in ty.shape.values:
        count = count * d
    index = relax.op.astype(relax.op.arange(0, count, 1, "int64"), "uint32")

    def u32(value):
        return relax.const(np.array(value & 0xFFFFFFFF, np.uint32), "uint32")

    def xorshift(x, bits):
        return relax.op.bitwise_xor(x, relax.op.right_shift(x, u32(bits)))

    x = relax.op.bitwise_xor(index, u32(seed * 0x9E3779B9))
    x = relax.op.multiply(xorshift(x, 16), u32(0x7FEB352D))
    x = relax.op.multiply(xorshift(x, 15), u32(0x846CA68B))
    x = bb.emit(xorshift(x, 16))
    fraction = relax.op.multiply(relax.op.astype(relax.op.right_shift(x, u32(8)), "float32"),
                                 relax.const(1.0 / (1 << 24), "float32"))
    return bb.emit(relax.op.reshape(fraction, ty.shape))


def _refuse_float4(*dtypes: str) -> None:
    if any("float4" in d for d in dtypes):
        raise TypeError("casts to and from FLOAT4E2M1 are not supported")


@converter("Cast")
def cast(importer, inputs, attrs, opset):
    """TVM's converter, refusing FLOAT4E2M1, which TVM's code generators
    cannot cast (they stop on an internal check)."""
    target = int(attrs.get("to", 0))
    _refuse_float4(_dtype(as_tensor(importer.bb, inputs[0])),
                   "float4" if target == onnx.TensorProto.FLOAT4E2M1 else "")
    return NotImplemented


@converter("CastLike")
def cast_like(importer, inputs, attrs, opset):
    """As ``Cast``."""
    _refuse_float4(*(_dtype(as_tensor(importer.bb, value)) for value in inputs[:2]))
    return NotImplemented


@converter("RMSNormalization")
def rms_normalization(importer, inputs, attrs, opset):
    """``x / sqrt(mean(x**2 over the axes from axis on) + epsilon) * scale``,
    the statistics in float32 when ``stash_type`` is 1 (the default), for
    every axis (TVM's converter stops on an internal check for axis 0)."""
    bb = importer.bb
    x, scale = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    rank, dtype = x.ty.ndim, _dtype(x)
    if rank < 0:
        raise ValueError("RMSNormalization needs its input's rank")
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for an input of rank {rank}")
    stash = "float32" if int(attrs.get("stash_type", 1)) == 1 and dtype != "float64" else dtype
    wide = bb.normalize(relax.op.astype(x, stash)) if stash != dtype else x
    squares = bb.normalize(relax.op.multiply(wide, wide))
    mean = bb.normalize(relax.op.mean(squares, list(range(axis % rank, rank)), keepdims=True))
    epsilon = _scalar(float(attrs.get("epsilon", 1e-5)), stash)
    normalized = bb.normalize(relax.op.multiply(wide, relax.op.rsqrt(bb.normalize(relax.op.add(mean, epsilon)))))
    if stash != dtype:
        normalized = bb.normalize(relax.op.astype(normalized, dtype))
    return relax.op.multiply(normalized, scale)


@converter("PRelu")
def prelu(importer, inputs, attrs, opset):
    """``x`` where it is not negative, else ``x * slope``. A 1-D slope of
    one value per channel (axis 1) that does not broadcast to the last axis
    applies per channel, as PyTorch's exporter meant it and onnxruntime
    runs it (TVM's converter stops on an assertion)."""
    bb = importer.bb
    x, slope = as_tensor(bb, inputs[0]), as_tensor(bb, inputs[1])
    dims = x.ty.shape.values if isinstance(x.ty.shape, relax.ShapeExpr) else None
    slope_dims = slope.ty.shape.values if isinstance(slope.ty.shape, relax.ShapeExpr) else None
    if dims is not None and slope_dims is not None and len(slope_dims) == 1 and len(dims) > 2:
        length, channels, last = (int(d) if isinstance(d, tvm.tirx.IntImm) else None
                                  for d in (slope_dims[0], dims[1], dims[-1]))
        if length not in (None, 1) and length == channels and length != last:
            slope = bb.normalize(relax.op.reshape(slope, [length] + [1] * (len(dims) - 2)))
    negative = bb.normalize(relax.op.less(x, _scalar(0, _dtype(x))))
    return relax.op.where(negative, bb.normalize(relax.op.multiply(x, slope)), x)


def _softplus(bb, x):
    """``log(1 + exp(x))`` as ``max(x, 0) + log1p(exp(-|x|))``, with
    ``log1p(t)`` as ``t - t**2 / 2`` for ``t`` below 1e-3: ``log(1 + t)``
    of a small ``t`` keeps few of ``t``'s digits (in float32, 1e-3 relative
    at ``t`` = 4.5e-5), more than ONNX's tolerance."""
    dtype = _dtype(x)
    t = bb.normalize(relax.op.exp(relax.op.negative(relax.op.abs(x))))
    series = relax.op.multiply(t, relax.op.subtract(_scalar(1, dtype), relax.op.multiply(t, _scalar(0.5, dtype))))
    log1p = relax.op.where(relax.op.less(t, _scalar(1e-3, dtype)), bb.normalize(series),
                           bb.normalize(relax.op.log(relax.op.add(t, _scalar(1, dtype)))))
    return bb.normalize(relax.op.add(relax.op.maximum(x, _scalar(0, dtype)), bb.normalize(log1p)))


@converter("Softplus")
def softplus(importer, inputs, attrs, opset):
    """``log(1 + exp(x))``, accurate for negative ``x`` (``_softplus``)."""
    return _softplus(importer.bb, as_tensor(importer.bb, inputs[0]))


@converter("Mish")
def mish(importer, inputs, attrs, opset):
    """``x * tanh(softplus(x))``, softplus accurate for negative ``x``."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    return relax.op.multiply(x, bb.normalize(relax.op.tanh(_softplus(bb, x))))


@converter("SpaceToDepth")
def space_to_depth(importer, inputs, attrs, opset):
    """SpaceToDepth in CRD mode (each channel's blocks together: output
    channel ``c * b * b + i * b + j``), which TVM's converter reads as DCR.
    DCR is TVM's converter's."""
    if str_attr(attrs.get("mode"), "DCR").upper() != "CRD":
        return NotImplemented
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    if not isinstance(x.ty.shape, relax.ShapeExpr) or len(x.ty.shape.values) != 4:
        raise ValueError("SpaceToDepth needs a 4-D input")
    block = int(attrs["blocksize"])
    n, c, h, w = x.ty.shape.values
    blocks = bb.normalize(relax.op.reshape(x, [n, c, h // block, block, w // block, block]))
    moved = bb.normalize(relax.op.permute_dims(blocks, [0, 1, 3, 5, 2, 4]))
    return relax.op.reshape(moved, [n, c * block * block, h // block, w // block])


@converter("ConvTranspose")
def conv_transpose(importer, inputs, attrs, opset):
    """ConvTranspose with ``output_shape``: the pads (and the output
    padding, where a pad would be negative) that give that shape, as ONNX
    defines them, for TVM's converter (which ignores ``output_shape``).
    Without ``output_shape``, TVM's converter."""
    if "output_shape" not in attrs:
        return NotImplemented
    x, weight = inputs[0], inputs[1]
    dims = x.ty.shape.values if isinstance(x.ty.shape, relax.ShapeExpr) else None
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    if not kernel and isinstance(weight.ty.shape, relax.ShapeExpr):
        kernel = [int(k) for k in weight.ty.shape.values[2:]]
    if dims is None or not kernel or not all(isinstance(d, tvm.tirx.IntImm) for d in dims[2:]):
        raise ValueError("ConvTranspose with output_shape needs the input's spatial sizes and the kernel's shape "
                         "known when it is imported")
    spatial = len(kernel)
    sizes = [int(d) for d in dims[2:]]
    wanted = [int(v) for v in attrs["output_shape"]][-spatial:]
    strides = [int(v) for v in attrs.get("strides", [1] * spatial)]
    dilations = [int(v) for v in attrs.get("dilations", [1] * spatial)]
    output_padding = [int(v) for v in attrs.get("output_padding", [0] * spatial)]
    upper = str_attr(attrs.get("auto_pad"), "NOTSET") == "SAME_UPPER"
    begins, ends, extra = [], [], []
    for size, want, stride, dilation, k, out_pad in zip(sizes, wanted, strides, dilations, kernel, output_padding):
        total = stride * (size - 1) + out_pad + (k - 1) * dilation + 1 - want
        begin, end = (total // 2, total - total // 2) if upper else (total - total // 2, total // 2)
        if begin < 0:
            raise ValueError(f"ConvTranspose output_shape {wanted} needs padding before the data, which is not "
                             "supported")
        begins.append(begin)
        ends.append(max(end, 0))
        extra.append(out_pad + max(-end, 0))
    converted = {key: value for key, value in attrs.items() if key not in ("output_shape", "auto_pad")}
    converted.update(pads=begins + ends, output_padding=extra)
    return tvm_converter(importer, "ConvTranspose", inputs, converted, opset)


@converter("Trilu")
def trilu(importer, inputs, attrs, opset):
    """The upper (``upper=1``) or lower triangle of the last two axes from
    diagonal ``k``: Relax's triu/tril for a constant ``k``; for one given at
    run time and static sizes of the last two axes, a mask of column minus
    row against ``k`` (TVM's converter fails on a zero-size input).
    TVM's converter otherwise."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    if 0 <= x.ty.ndim < 2:
        raise ValueError(f"Trilu needs an input of rank 2 or more, got rank {x.ty.ndim}")
    upper = bool(int(attrs.get("upper", 1)))
    k = 0
    if len(inputs) > 1 and inputs[1] is not None:
        value = const_value(importer, inputs[1])
        if value is None:
            dims = x.ty.shape.values if isinstance(x.ty.shape, relax.ShapeExpr) else None
            if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims[-2:]):
                return NotImplemented
            rows, cols = (int(d) for d in dims[-2:])
            diagonal = np.arange(cols)[None, :] - np.arange(rows)[:, None]
            offset = bb.normalize(relax.op.reshape(as_tensor(bb, inputs[1], "int64"), []))
            compare = relax.op.greater_equal if upper else relax.op.less_equal
            mask = bb.normalize(compare(relax.const(diagonal.astype(np.int64), "int64"), offset))
            return relax.op.where(mask, x, bb.normalize(relax.op.zeros_like(x)))
        k = int(np.asarray(value).reshape(-1)[0])
    return (relax.op.triu if upper else relax.op.tril)(x, k)


@converter("Conv")
def conv(importer, inputs, attrs, opset):
    """A float16 convolution accumulated in float32 and rounded once (as
    onnxruntime's and ONNX's reference; accumulating in float16 rounds every
    partial sum); other types are TVM's converter's."""
    bb = importer.bb
    tensors = [as_tensor(bb, value) if value is not None else None for value in inputs]
    if _dtype(tensors[0]) != "float16":
        return NotImplemented
    wide = [bb.normalize(relax.op.astype(t, "float32")) if t is not None else None for t in tensors]
    wide += [None] * (3 - len(wide))  # (data, weight, bias: TVM's converter reads all three)
    result = bb.normalize(tvm_converter(importer, "Conv", wide, attrs, opset))
    return relax.op.astype(result, "float16")


@converter("Elu")
def elu(importer, inputs, attrs, opset):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere, in ``x``'s
    type (TVM's converter mixes in float32 constants); float16 data in
    float32, as onnxruntime computes it."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    dtype = _dtype(x)
    if dtype == "float16":  # (computed in float32, as onnxruntime does)
        wide = elu(importer, [bb.normalize(relax.op.astype(x, "float32"))], attrs, opset)
        return relax.op.astype(bb.normalize(wide), dtype)
    alpha = _scalar(float(attrs.get("alpha", 1.0)), dtype)
    zero, one = _scalar(0, dtype), _scalar(1, dtype)
    negative = relax.op.multiply(alpha, relax.op.subtract(relax.op.exp(x), one))
    return relax.op.where(relax.op.greater(x, zero), x, negative)


@converter("EyeLike")
def eye_like(importer, inputs, attrs, opset):
    """Ones on the ``k``-th diagonal of a matrix shaped like the input, of
    the ``dtype`` attribute's type (the input's when absent)."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    dtype = attrs.get("dtype")
    dtype = _dtype(x) if dtype is None else str(onnx.helper.tensor_dtype_to_np_dtype(int(dtype)))
    eye = bb.normalize(relax.op.eye_like(x, int(attrs.get("k", 0))))  # (TVM's legalization keeps x's type)
    return eye if dtype == _dtype(x) else relax.op.astype(eye, dtype)


@converter("BitCast")
def bit_cast(importer, inputs, attrs, opset):
    """The input's bits read as the ``to`` type, of the same width (a bool
    is the byte 0 or 1)."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    source, target = _dtype(x), str(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
    width = {t: 8 if t == "bool" else np.dtype(t).itemsize * 8 for t in (source, target)}
    if width[source] != width[target]:
        raise ValueError(f"BitCast from {source} to {target}: the types' widths differ "
                         f"({width[source]} and {width[target]} bits)")
    if source == target:
        return x
    if "bool" in (source, target):  # (a bool's byte: 0 or 1 both ways)
        return relax.op.astype(x, target)

    def reinterpret(data):
        return te.compute(data.shape, lambda *i: tirx.reinterpret(target, data(*i)), name="bit_cast")

    return bb.emit_te(reinterpret, x, primfunc_name_hint="bit_cast")


@converter("Clip")
def clip(importer, inputs, attrs, opset):
    """Clip as Relax's maximum and minimum, which shapefn legalizes keeping
    NaN as onnxruntime does; TVM's converter emits TVM's kernels for them
    while importing (NaN became a bound: found by fuzzing). A NaN bound is
    no bound, as in TVM's converter and onnxruntime."""
    bb = importer.bb
    data = as_tensor(bb, inputs[0])
    dtype = str(data.ty.dtype)
    if opset < 11:
        bounds = [None if attrs.get(name) is None else relax.const(float(attrs[name]), dtype)
                  for name in ("min", "max")]
    else:
        bounds = [inputs[i] if len(inputs) > i else None for i in (1, 2)]
    result = data
    for bound, op, unbounded in zip(bounds, (relax.op.maximum, relax.op.minimum), (-np.inf, np.inf)):
        if bound is None:
            continue
        bound = as_tensor(bb, bound, dtype)
        if "float" in dtype:
            bound = bb.normalize(relax.op.where(relax.op.isnan(bound), relax.const(unbounded, dtype), bound))
        result = bb.normalize(op(result, bound))
    return result


def _variadic(binary_op):
    def convert(importer, inputs, attrs, opset):
        """Variadic Min/Max folded pairwise into broadcasting binary ops. TVM's
        converter broadcasts every input to one shape computed at import time
        and rejects sizes it cannot relate (``N`` and ``M``, equal or 1 only
        at run time, as batched NMS's boxes and offsets are)."""
        values = [v for v in inputs if v is not None]
        if all(const_value(importer, v) is not None for v in values):
            return NotImplemented
        values = [as_tensor(importer.bb, v) for v in values]
        result = values[0]
        for value in values[1:]:
            result = importer.bb.normalize(binary_op(result, value))
        return result

    return convert


converter("Min")(_variadic(relax.op.minimum))
converter("Max")(_variadic(relax.op.maximum))


@converter("Equal")
def equal(importer, inputs, attrs, opset):
    """Equal on shape values. TVM's converter compares a shape with a constant
    or another shape structurally at import time, so a size that equals the
    other side only at run time (``Shape(x)[0] == 0`` for an empty ``x``)
    compares False, and it rejects a shape against a runtime tensor. Here
    only elements decided at import time (literals, the same size) fold; the
    rest compare at run time."""
    a, b = inputs
    if not any(isinstance(v.ty, relax.ShapeType) for v in (a, b)):
        return NotImplemented
    la, lb = shape_values(importer, a), shape_values(importer, b)
    if la is not None and lb is not None and len(la) == len(lb):
        decided = []
        for x, y in zip(la, lb):
            if isinstance(x, tvm.tirx.IntImm) and isinstance(y, tvm.tirx.IntImm):
                decided.append(x.value == y.value)
            elif tvm_ffi.structural_equal(x, y):
                decided.append(True)
            else:
                break
        else:
            return relax.const(np.array(decided, bool), "bool")
    return relax.op.equal(as_tensor(importer.bb, a), as_tensor(importer.bb, b))
