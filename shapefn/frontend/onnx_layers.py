"""shapefn's ONNX converters for network layers where TVM's converter gives
another result than ONNX defines or needs sizes known at import time:
normalizations (their statistics outputs, training-mode running
statistics; LpNormalization, which TVM lacks), Pad with pads or a value
given at run time or with ``axes``, and MaxPool with SAME padding or ``ceil_mode`` over sizes
known only at run time. Registered in ``onnx_converters.CONVERTERS`` when
imported (``onnx.py`` imports this module)."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .. import ops
from ..errors import UnsupportedOnnxOp
from .onnx_converters import _absent, _length, as_tensor, const_value, converter, ndim_of, str_attr, tvm_converter


@converter("BatchNormalization")
def batch_normalization(importer, inputs, attrs, opset):
    """Training-mode BatchNormalization: ONNX's running statistics are
    ``running * momentum + batch * (1 - momentum)``; Relax's batch_norm
    weighs them the other way round (PyTorch's momentum)."""
    if not attrs.get("training_mode", 0):
        return NotImplemented
    attrs = {**attrs, "momentum": 1 - attrs.get("momentum", 0.9)}
    return tvm_converter(importer, "BatchNormalization", inputs, attrs, opset)


@converter("LayerNormalization")
def layer_normalization(importer, inputs, attrs, opset):
    """LayerNormalization whose Mean or InvStdDev output is used: TVM's
    converter gives them as the constant 0."""
    if attrs["tvm_custom"]["num_outputs"] == 1:
        return NotImplemented
    bb = importer.bb
    data = inputs[0]
    normalized = bb.normalize(tvm_converter(importer, "LayerNormalization", inputs, attrs, opset))
    y = normalized.fields[0] if isinstance(normalized, relax.Tuple) else bb.emit(relax.TupleGetItem(normalized, 0))
    ndim = ndim_of(data)
    axes = list(range(attrs.get("axis", -1) % ndim, ndim))
    return relax.Tuple([y, *_normalization_statistics(bb, data, axes, attrs.get("epsilon", 1e-5))])


@converter("SkipLayerNormalization")
def skip_layer_normalization(importer, inputs, attrs, opset):
    """com.microsoft SkipLayerNormalization. TVM's converter requires the
    optional beta and bias, gives the statistics outputs as the constant 0
    and not the sum (``input + skip + bias``, what is normalized)."""
    bb = importer.bb
    data, skip, gamma = inputs[:3]
    beta = inputs[3] if len(inputs) > 3 and inputs[3] is not None else relax.op.zeros_like(gamma)
    total = bb.emit(relax.op.add(data, skip))
    if len(inputs) > 4 and inputs[4] is not None:
        total = bb.emit(relax.op.add(total, inputs[4]))
    epsilon = attrs.get("epsilon", 1e-12)
    y = bb.emit(relax.op.nn.layer_norm(total, gamma, beta, [-1], epsilon))
    if attrs["tvm_custom"]["num_outputs"] == 1:
        return y
    return relax.Tuple([y, *_normalization_statistics(bb, total, [ndim_of(total) - 1], epsilon), total])


def _normalization_statistics(bb, data, axes, epsilon) -> tuple:
    """Mean and 1 / sqrt(variance + epsilon) over ``axes`` (kept as size 1),
    in float32, as ONNX's normalizations define their optional outputs."""
    x = as_tensor(bb, data, "float32")
    mean = bb.emit(relax.op.mean(x, axes, keepdims=True))
    centered = bb.emit(relax.op.subtract(x, mean))
    variance = bb.emit(relax.op.mean(bb.emit(relax.op.multiply(centered, centered)), axes, keepdims=True))
    inv_std_dev = bb.emit(relax.op.rsqrt(bb.emit(relax.op.add(variance, relax.const(float(epsilon), "float32")))))
    return mean, inv_std_dev


@converter("MaxPool")
def max_pool(importer, inputs, attrs, opset):
    """2-D MaxPool over sizes known only at run time with ``auto_pad``
    SAME_UPPER / SAME_LOWER (Keras exports) or ``ceil_mode``. ONNX's SAME
    padding, ``(ceil(in / s) - 1) * s + window - in`` in all, depends on
    ``in mod s``, so TVM's converter needs the size; with ``ceil_mode``,
    Relax's output size is an ``if_then_else`` (a last window that would
    start in the padding after is dropped), which shapefn's VM does not
    compute. Where the padding before is the same for every input size
    and some padding after gives ONNX's output size for every input size
    (the usual windows), the pool pads itself; otherwise the input is
    padded first, by amounts computed from its size at run time."""
    data = inputs[0]
    ty = data.ty
    mode = str_attr(attrs.get("auto_pad"), "NOTSET")
    same = mode in ("SAME_UPPER", "SAME_LOWER")
    if attrs["tvm_custom"]["num_outputs"] != 1 or not (same or attrs.get("ceil_mode", 0)) \
            or not isinstance(ty, relax.TensorType) or ty.shape is None or ty.ndim != 4 \
            or all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values[2:]):
        return NotImplemented
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    pads = [0] * 4 if same or mode == "VALID" else list(attrs.get("pads", [0] * 4))
    axes = [(((k - 1) * d + 1), s, pads[i], pads[i + 2]) for i, (k, s, d) in enumerate(zip(kernel, strides, dilations))]
    static = [_static_pool_pads(mode, *axis) for axis in axes]
    if all(p is not None for p in static):
        (top, bottom), (left, right) = static
        return relax.op.nn.max_pool2d(data, kernel, strides, [top, left, bottom, right], dilations)
    befores, afters = [], []
    for size, (window, stride, before, after) in zip(ty.shape.values[2:], axes):
        if same:
            total = tvm.tirx.max((_ceildiv(size, stride) - 1) * stride + window - size, 0)
            before = total // 2 if mode == "SAME_UPPER" else total - total // 2
            count = _ceildiv(size, stride)
        else:
            count = tvm.tirx.min(_ceildiv(size + before + after - window, stride), (size + before - 1) // stride) + 1
        befores.append(before)
        afters.append((count - 1) * stride + window - size - before)  # negative: crops
    bb = importer.bb
    amounts = bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([0, 0, *befores, 0, 0, *afters])))
    dtype = str(ty.dtype)
    lowest = -np.inf if "float" in dtype else np.iinfo(dtype).min
    padded = ops.pad(bb, data, amounts, relax.const(lowest, dtype))
    return relax.op.nn.max_pool2d(padded, kernel, strides, [0, 0, 0, 0], dilations)


def _ceildiv(a, b):
    return (a + b - 1) // b


def _static_pool_pads(mode: str, window: int, stride: int, before: int, after: int) -> tuple[int, int] | None:
    """Padding (before, after) of one axis with which a pool (floor mode)
    gives ONNX's windows for every input size, or None if there is none:
    SAME's when it does not depend on ``in mod stride``; for ``ceil_mode``,
    the padding after grown by ``stride - 1`` unless a last window could
    start in it (ONNX and Relax drop that one)."""
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max(window - (rest or stride), 0) for rest in range(stride)]  # by in mod stride
        befores = {t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in totals}
        if len(befores) != 1:
            return None
        (before,) = befores
        padded_after = max(totals) - before
        sizes = range(1, window + 2 * stride + 1)

        def count(size):
            return _ceildiv(size, stride)
    else:
        padded_after = after + stride - 1
        sizes = range(max(window - before - after, 1), window + 2 * stride + 1)

        def count(size):
            return min(_ceildiv(size + before + after - window, stride), (size + before - 1) // stride) + 1
    # Both counts grow by one when the size grows by the stride: one period past the window decides.
    for size in sizes:
        if (size + before + padded_after - window) // stride + 1 != count(size):
            return None
    return before, padded_after


@converter("LpNormalization")
def lp_normalization(importer, inputs, attrs, opset):
    """``x`` divided by its L1 or L2 norm along ``axis``; 0 where the norm
    is 0, as ONNX's reference."""
    bb = importer.bb
    x = as_tensor(bb, inputs[0])
    p, axis = int(attrs.get("p", 2)), int(attrs.get("axis", -1))
    if p not in (1, 2):
        raise ValueError(f"LpNormalization's p must be 1 or 2, got {p}")
    if p == 1:
        norm = relax.op.sum(relax.op.abs(x), axis=[axis], keepdims=True)
    else:
        norm = relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), axis=[axis], keepdims=True))
    norm = bb.normalize(norm)
    zero = relax.const(np.zeros((), str(x.ty.dtype)), str(x.ty.dtype))
    return relax.op.where(relax.op.equal(norm, zero), zero, relax.op.divide(x, norm))


@converter("Pad")
def pad(importer, inputs, attrs, opset):
    with_axes = len(inputs) > 3 and not _absent(importer, inputs[3])
    if opset < 11 or (not with_axes and const_value(importer, inputs[1]) is not None
                      and (len(inputs) < 3 or _absent(importer, inputs[2])
                           or const_value(importer, inputs[2]) is not None)):
        return NotImplemented
    bb = importer.bb
    data = inputs[0]
    dtype = str(data.ty.dtype)
    value = inputs[2] if len(inputs) > 2 and not _absent(importer, inputs[2]) else relax.const(0, dtype)
    pads = as_tensor(bb, inputs[1], "int64")
    if with_axes:
        pads = _pads_of_every_axis(importer, pads, inputs[3], ndim_of(data))
    return ops.pad(bb, data, pads, as_tensor(bb, value, dtype), mode=str_attr(attrs.get("mode"), "constant"))


def _pads_of_every_axis(importer, pads, axes, ndim: int):
    """Pad's ``pads`` for the listed ``axes`` (begins, then ends) spread over
    every axis, the others padded by 0: a gather from ``pads`` and a 0."""
    listed = const_value(importer, axes)
    if listed is None:
        raise UnsupportedOnnxOp("Pad with axes given at run time is not supported (constant axes are)")
    listed = [int(a) for a in listed.reshape(-1)]
    if any(not -ndim <= a < ndim for a in listed) or len({a % ndim for a in listed}) != len(listed):
        raise ValueError(f"Pad's axes {listed} must be distinct axes of a rank-{ndim} input")
    if _length(pads) != 2 * len(listed):
        raise ValueError(f"Pad's pads must hold 2 values per axis: {len(listed)} axes, {_length(pads)} pads")
    position = {a % ndim: k for k, a in enumerate(listed)}
    zero = 2 * len(listed)  # (the index of the appended 0)
    index = [position[d] + k * len(listed) if d in position else zero for k in (0, 1) for d in range(ndim)]
    bb = importer.bb
    pads = pads if str(pads.ty.dtype) == "int64" else bb.normalize(relax.op.astype(pads, "int64"))
    padded = bb.normalize(relax.op.concat([pads, relax.const(np.zeros(1, np.int64), "int64")], axis=0))
    return bb.normalize(relax.op.take(padded, relax.const(np.array(index, np.int64), "int64"), axis=0))
