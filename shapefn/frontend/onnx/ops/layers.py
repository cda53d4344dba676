"""shapefn's ONNX converters for network layers where TVM's converter gives
another result than ONNX defines or needs sizes known at import time:
normalizations (their statistics outputs, training-mode running
statistics; LpNormalization, which TVM lacks), Pad with pads or a value
given at run time or with ``axes``, and MaxPool with SAME padding or ``ceil_mode`` over sizes
known only at run time or with its Indices output, and MaxUnpool to an
``output_shape`` known at import."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ....compiler import ops
from ....runtime.errors import UnsupportedOnnxOp
from ..registry import converter, tvm_converter
from ..values import absent, as_tensor, const_value, ndim_of, static_length, str_attr


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


@converter("SkipLayerNormalization", domain="com.microsoft")
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
    if attrs["tvm_custom"]["num_outputs"] == 2:
        return _max_pool_with_indices(importer.bb, data, attrs)
    mode = str_attr(attrs.get("auto_pad"), "NOTSET")
    same = mode in ("SAME_UPPER", "SAME_LOWER")
    explicit = _same_pads_explicit(importer, "MaxPool", inputs, attrs, opset)
    if explicit is not NotImplemented:
        return explicit
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


@converter("AveragePool")
def average_pool(importer, inputs, attrs, opset):
    """AveragePool with ``auto_pad`` SAME_UPPER / SAME_LOWER over spatial
    sizes known at import, whatever the other sizes (``_same_pads_explicit``);
    otherwise TVM's converter."""
    return _same_pads_explicit(importer, "AveragePool", inputs, attrs, opset)


def _same_pads_explicit(importer, op_type: str, inputs, attrs, opset):
    """A pool with ``auto_pad`` SAME_UPPER / SAME_LOWER over spatial sizes
    known at import, by TVM's converter given ONNX's explicit padding:
    ``(ceil(in / s) - 1) * s + window - in`` in all (dilations counted, half
    before, the odd one after for SAME_UPPER, before for SAME_LOWER). TVM's
    converter reads every size of the input as an integer (a symbolic batch
    fails) and, for MaxPool with SAME_LOWER, counts ``floor(in / s)`` windows
    where ONNX counts ``ceil(in / s)``. NotImplemented otherwise."""
    mode = str_attr(attrs.get("auto_pad"), "NOTSET")
    ty = getattr(inputs[0], "ty", None)
    if mode not in ("SAME_UPPER", "SAME_LOWER") or not isinstance(ty, relax.TensorType) or ty.shape is None \
            or not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values[2:]):
        return NotImplemented
    sizes = [int(d) for d in ty.shape.values[2:]]
    rank = len(sizes)
    kernel = [int(k) for k in attrs["kernel_shape"]]
    strides = [int(v) for v in attrs.get("strides", [1] * rank)]
    dilations = [int(v) for v in attrs.get("dilations", [1] * rank)]
    befores, afters = [], []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations):
        total = max((_ceildiv(size, stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
        before = total // 2 if mode == "SAME_UPPER" else total - total // 2
        befores.append(before)
        afters.append(total - before)
    explicit = {key: value for key, value in attrs.items() if key != "auto_pad"} | {"pads": befores + afters}
    return tvm_converter(importer, op_type, inputs, explicit, opset)


def _max_pool_with_indices(bb: relax.BlockBuilder, data, attrs):
    """MaxPool and its Indices output (the flat index of each maximum in
    the input, the first in window order where several are equal; column-
    major within a 2-D plane for ``storage_order=1``), over spatial sizes
    known at import: every window offset is a strided slice of the padded
    input, the maximum and the first offset reaching it are reductions
    over the offsets, and each (offset, output position)'s input index is a
    constant table."""
    ty = data.ty
    spatial = ty.shape.values[2:] if ty.shape is not None else ()
    if ty.shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in spatial):
        raise UnsupportedOnnxOp("MaxPool's Indices output is supported over spatial sizes known at import",
                                {"MaxPool": []})
    sizes = [int(d) for d in spatial]
    rank = len(sizes)
    kernel = [int(k) for k in attrs["kernel_shape"]]
    strides = [int(s) for s in attrs.get("strides", [1] * rank)]
    dilations = [int(d) for d in attrs.get("dilations", [1] * rank)]
    mode = str_attr(attrs.get("auto_pad"), "NOTSET")
    pads = [int(p) for p in attrs.get("pads", [0] * 2 * rank)] if mode == "NOTSET" else [0] * 2 * rank
    order = int(attrs.get("storage_order", 0))
    if order not in (0, 1) or (order == 1 and rank != 2):
        raise UnsupportedOnnxOp(f"MaxPool's storage_order={order} is supported for 2-D pools only",
                                {"MaxPool": []})
    counts, befores = [], []
    for a, (size, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
        window = (k - 1) * d + 1
        if mode in ("SAME_UPPER", "SAME_LOWER"):
            count = _ceildiv(size, s)
            total = max((count - 1) * s + window - size, 0)
            before = total // 2 if mode == "SAME_UPPER" else total - total // 2
        else:
            before, after = (0, 0) if mode == "VALID" else (pads[a], pads[a + rank])
            span = size + before + after - window
            if attrs.get("ceil_mode", 0):
                # A last window starting in the padding after is dropped.
                count = min(_ceildiv(span, s), (size + before - 1) // s) + 1
            else:
                count = span // s + 1
        counts.append(count)
        befores.append(before)
    offsets = list(np.ndindex(*kernel))
    # positions[d][j][o]: input position on axis d of offset j at output position o.
    positions = [np.array([[o * s - b + off[d] * dil for o in range(n)] for off in offsets])
                 for d, (n, s, b, dil) in enumerate(zip(counts, strides, befores, dilations))]
    grid = np.ix_(*[np.arange(n) for n in counts])
    valid = np.ones((len(offsets), *counts), bool)
    flat = np.zeros((len(offsets), *counts), np.int64)
    place = [int(np.prod(sizes[d + 1:])) for d in range(rank)] if order == 0 else [1, sizes[0]]
    for j in range(len(offsets)):
        for d in range(rank):
            p = positions[d][j][grid[d]]
            valid[j] &= (p >= 0) & (p < sizes[d])
            flat[j] += p * place[d]
    if not valid.any(axis=0).all():
        raise ValueError("MaxPool: a window lies wholly in the padding (pads as large as the kernel)")
    dtype = str(ty.dtype)
    lowest = float("-inf") if "float" in dtype else int(np.iinfo(dtype).min)
    grow = [max((n - 1) * s + (k - 1) * d + 1 - size - b, 0)
            for n, s, k, d, size, b in zip(counts, strides, kernel, dilations, sizes, befores)]
    padded = bb.emit(relax.op.nn.pad(data, [0, 0, 0, 0] + [v for pair in zip(befores, grow) for v in pair],
                                     pad_value=lowest))
    axes = list(range(2, 2 + rank))
    windows = []
    for off in offsets:
        begin = [o * d for o, d in zip(off, dilations)]
        end = [b + (n - 1) * s + 1 for b, n, s in zip(begin, counts, strides)]
        window = relax.op.strided_slice(padded, axes, begin, end, strides)
        windows.append(bb.emit(relax.op.expand_dims(window, 0)))
    stacked = bb.emit(relax.op.concat(windows, axis=0))  # [offsets, N, C, *counts]
    mask = relax.const(valid.reshape(len(offsets), 1, 1, *counts))
    candidates = bb.emit(relax.op.where(mask, stacked, relax.const(lowest, dtype)))
    maximum = bb.emit(relax.op.max(candidates, axis=0))
    hit = relax.op.logical_and(mask, relax.op.equal(candidates, relax.op.expand_dims(maximum, 0)))
    first = bb.emit(relax.op.argmax(relax.op.astype(hit, "int32"), axis=0, keepdims=True))
    chosen = relax.op.equal(relax.const(np.arange(len(offsets), dtype=np.int32).reshape(-1, 1, 1, *[1] * rank),
                                        "int32"), first)
    table = relax.const(flat.reshape(len(offsets), 1, 1, *counts), "int64")
    within = bb.emit(relax.op.sum(relax.op.where(chosen, table, relax.const(0, "int64")), axis=0))
    batch, channels = ty.shape.values[:2]
    planes = relax.op.arange(0, batch * channels, 1, "int64")
    plane = relax.op.multiply(relax.op.reshape(planes, [batch, channels, *[1] * rank]),
                              relax.const(int(np.prod(sizes)), "int64"))
    return relax.Tuple([maximum, bb.emit(relax.op.add(within, plane))])


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
    with_axes = len(inputs) > 3 and not absent(importer, inputs[3])
    mode = str_attr(attrs.get("mode"), "constant")
    if opset < 11 or (not with_axes and mode != "wrap" and const_value(importer, inputs[1]) is not None
                      and (len(inputs) < 3 or absent(importer, inputs[2])
                           or const_value(importer, inputs[2]) is not None)):
        return NotImplemented
    bb = importer.bb
    data = inputs[0]
    dtype = str(data.ty.dtype)
    value = inputs[2] if len(inputs) > 2 and not absent(importer, inputs[2]) else relax.const(0, dtype)
    pads = as_tensor(bb, inputs[1], "int64")
    if with_axes:
        pads = _pads_of_every_axis(importer, pads, inputs[3], ndim_of(data))
    return ops.pad(bb, data, pads, as_tensor(bb, value, dtype), mode=mode)


def _pads_of_every_axis(importer, pads, axes, ndim: int):
    """Pad's ``pads`` for the listed ``axes`` (begins, then ends) spread over
    every axis, the others padded by 0: a gather from ``pads`` and a 0."""
    listed = const_value(importer, axes)
    if listed is None:
        raise UnsupportedOnnxOp("Pad with axes given at run time is not supported (constant axes are)")
    listed = [int(a) for a in listed.reshape(-1)]
    if any(not -ndim <= a < ndim for a in listed) or len({a % ndim for a in listed}) != len(listed):
        raise ValueError(f"Pad's axes {listed} must be distinct axes of a rank-{ndim} input")
    if static_length(pads) != 2 * len(listed):
        raise ValueError(f"Pad's pads must hold 2 values per axis: {len(listed)} axes, {static_length(pads)} pads")
    position = {a % ndim: k for k, a in enumerate(listed)}
    zero = 2 * len(listed)  # (the index of the appended 0)
    index = [position[d] + k * len(listed) if d in position else zero for k in (0, 1) for d in range(ndim)]
    bb = importer.bb
    pads = pads if str(pads.ty.dtype) == "int64" else bb.normalize(relax.op.astype(pads, "int64"))
    padded = bb.normalize(relax.op.concat([pads, relax.const(np.zeros(1, np.int64), "int64")], axis=0))
    return bb.normalize(relax.op.take(padded, relax.const(np.array(index, np.int64), "int64"), axis=0))


@converter("MaxUnpool")
def max_unpool(importer, inputs, attrs, opset):
    """MaxUnpool with an ``output_shape`` known at import (TVM's converter
    takes none): each value goes to its flat index in a zero tensor of that
    shape (MaxPool's input, whose flat indices MaxPool gives, as ONNX's
    schema and onnxruntime have it); an index outside it goes to a slot
    past its end, cut off after. An output shape known only at run time is
    refused."""
    if len(inputs) < 3 or absent(importer, inputs[2]):
        return NotImplemented
    known = const_value(importer, inputs[2])
    if known is None:
        raise UnsupportedOnnxOp("MaxUnpool with output_shape given at run time is not supported",
                                {"MaxUnpool": []})
    bb = importer.bb
    data, indices = inputs[0], as_tensor(bb, inputs[1], "int64")
    out = [int(v) for v in known.reshape(-1)]
    if len(out) != ndim_of(data) or min(out) < 0:
        raise ValueError(f"MaxUnpool's output_shape {out} must hold {ndim_of(data)} sizes, none negative")
    total = int(np.prod(out))
    flat_indices = bb.emit(relax.op.reshape(indices, [-1]))
    size = relax.const(total, "int64")
    inside = relax.op.logical_and(relax.op.greater_equal(flat_indices, relax.const(0, "int64")),
                                  relax.op.less(flat_indices, size))
    slots = bb.emit(relax.op.where(inside, flat_indices, size))
    zeros = bb.emit(relax.op.zeros(relax.ShapeExpr([total + 1]), str(data.ty.dtype)))
    scattered = bb.emit(relax.op.scatter_elements(zeros, slots, relax.op.reshape(data, [-1]), axis=0))
    kept = bb.emit(relax.op.strided_slice(scattered, [0], [0], [total]))
    return relax.op.reshape(kept, out)
