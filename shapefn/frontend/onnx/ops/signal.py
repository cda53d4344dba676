"""shapefn's ONNX converters for DFT (opsets 17 and 20): forward and
inverse, real or complex input, one-sided (real-input forward, and its
inverse), with ``dft_length`` known at import; and STFT over frames of a
length known at import. Each transform is two real
matrix products with cosine and sine tables built at import, so it runs
on every device."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ....compiler import ops
from ....compiler.shape_calls import emit_shape
from ....runtime.errors import UnsupportedOnnxOp
from ..registry import converter
from ..values import absent, const_value, ndim_of


@converter("DFT")
def dft(importer, inputs, attrs, opset):
    bb = importer.bb
    x = inputs[0]
    ty = x.ty
    rank = ndim_of(x)
    if ty.shape is None:
        raise UnsupportedOnnxOp("DFT of an input of unknown shape is not supported", {"DFT": []})
    dims = ty.shape.values
    if not isinstance(dims[-1], tvm.tirx.IntImm) or int(dims[-1]) not in (1, 2):
        raise ValueError(f"DFT's input must end in an axis of 1 (real) or 2 (complex) values, got shape {dims}")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if onesided and inverse and int(dims[-1]) != 2:
        raise ValueError("DFT: an inverse one-sided transform takes complex input")
    length = None
    if len(inputs) > 1 and not absent(importer, inputs[1]):
        length = const_value(importer, inputs[1])
        if length is None:
            raise UnsupportedOnnxOp("DFT with dft_length given at run time is not supported", {"DFT": []})
        length = int(np.asarray(length).reshape(()))
    if opset < 20:
        axis = int(attrs.get("axis", 1))
    elif len(inputs) > 2 and not absent(importer, inputs[2]):
        axis = const_value(importer, inputs[2])
        if axis is None:
            return _along_runtime_axis(bb, x, inputs[2], length, inverse, onesided)
        axis = int(np.asarray(axis).reshape(()))
    else:
        axis = -2
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ValueError(f"DFT's axis {axis} is out of range for rank {rank} (the last axis holds the parts)")
    return _transform(bb, x, axis % rank, length, inverse, onesided)


def _transform(bb, x, axis: int, length: int | None, inverse: bool, onesided: bool):
    extent = x.ty.shape.values[axis]
    if not isinstance(extent, tvm.tirx.IntImm):
        raise UnsupportedOnnxOp("DFT along an axis whose size is known only at run time is not supported",
                                {"DFT": []})
    extent = int(extent)
    n = length if length is not None else 2 * (extent - 1) if inverse and onesided else extent
    if n < 1:
        raise ValueError(f"DFT's length must be positive, got {n}")
    dtype = str(x.ty.dtype)
    rank = ndim_of(x)
    # The transformed axis last: [..., extent] real and imaginary parts.
    order = [d for d in range(rank - 1) if d != axis] + [axis]
    real = bb.emit(relax.op.permute_dims(relax.op.take(x, relax.const(0, "int64"), axis=rank - 1), order))
    imag = (bb.emit(relax.op.permute_dims(relax.op.take(x, relax.const(1, "int64"), axis=rank - 1), order))
            if int(x.ty.shape.values[-1]) == 2 else None)
    if inverse and onesided:
        used = min(extent, n // 2 + 1)  # (numpy's irfft reads n // 2 + 1 bins)
        k, t = np.arange(used)[:, None], np.arange(n)[None, :]
        weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) / n
        angle = 2 * np.pi * k * t / n
        parts = [_matmul(bb, real, weight * np.cos(angle), used, dtype),
                 _matmul(bb, imag, -weight * np.sin(angle), used, dtype)]
        outs = [bb.emit(relax.op.add(*parts))]
    else:
        bins = n // 2 + 1 if onesided else n
        used = min(extent, n)  # (a shorter signal is padded with zeros, a longer one cut)
        k, f = np.arange(used)[:, None], np.arange(bins)[None, :]
        angle = 2 * np.pi * k * f / n
        sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
        cos, sin = scale * np.cos(angle), scale * sign * np.sin(angle)
        # (a + ib)(cos + i sin) = (a cos - b sin) + i(a sin + b cos)
        re = [_matmul(bb, real, cos, used, dtype)]
        im = [_matmul(bb, real, sin, used, dtype)]
        if imag is not None:
            re.append(bb.emit(relax.op.negative(_matmul(bb, imag, sin, used, dtype))))
            im.append(_matmul(bb, imag, cos, used, dtype))
        outs = [bb.emit(relax.op.add(*re)) if len(re) == 2 else re[0],
                bb.emit(relax.op.add(*im)) if len(im) == 2 else im[0]]
    back = [order.index(d) for d in range(rank - 1)]
    outs = [relax.op.expand_dims(relax.op.permute_dims(o, back), rank - 1) for o in outs]
    return relax.op.concat(outs, axis=rank - 1) if len(outs) == 2 else outs[0]


def _matmul(bb, signal, table: np.ndarray, used: int, dtype: str):
    """``signal[..., :used] @ table``, the table of ``used`` rows."""
    extent = int(signal.ty.shape.values[-1])
    if used < extent:
        signal = bb.emit(relax.op.strided_slice(signal, [ndim_of(signal) - 1], [0], [used]))
    return bb.emit(relax.op.matmul(signal, relax.const(table.astype(dtype), dtype)))


def _along_runtime_axis(bb, x, axis, length: int | None, inverse: bool, onesided: bool):
    """DFT along an axis given at run time: the transform along each axis
    it may name, where all give one output shape, and the one it names
    picked. ``shapefn.reduce_axes`` validates the axis (only it crosses to
    the host) and gives the input's shape with that axis as 1; an axis of
    extent 1 (whose transform is its input, as a complex value) is found
    by no other."""
    rank = ndim_of(x)
    dims = x.ty.shape.values
    if length is not None or onesided or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        raise UnsupportedOnnxOp("DFT with its axis given at run time is supported over static sizes, without "
                                "dft_length or onesided (whose output shape depends on the axis)", {"DFT": []})
    axis = bb.emit(relax.op.astype(axis, "int64"))
    # As an axis of the signal (the input without its last axis, whose axes
    # reduce_axes validates): negative ones count one fewer from the end,
    # and -1 (the parts' axis) is out of range.
    def i64(value):
        return relax.const(value, "int64")

    shifted = relax.op.where(relax.op.less(axis, i64(0)), relax.op.add(axis, i64(1)), axis)
    axis = bb.emit(relax.op.where(relax.op.equal(axis, i64(-1)), i64(rank - 1), shifted))
    candidates = list(range(rank - 1))
    signal = bb.emit(relax.op.take(x, relax.const(0, "int64"), axis=rank - 1))
    kept, _ = emit_shape(bb, "shapefn.reduce_axes", [signal, axis], [rank - 1, rank - 1], [1], prefix="dft")
    named = bb.emit(relax.op.equal(relax.op.shape_to_tensor(relax.ShapeExpr(kept)), relax.const(1, "int64")))
    identity = relax.op.concat([x, relax.op.zeros_like(x)], axis=rank - 1) if int(dims[-1]) == 1 else x
    result = bb.emit(identity)
    for a in candidates:
        if int(dims[a]) == 1:
            continue
        picked = bb.emit(relax.op.take(named, relax.const(a, "int64"), axis=0))
        result = bb.emit(relax.op.where(picked, _transform(bb, x, a, None, inverse, False), result))
    return result


@converter("STFT")
def stft(importer, inputs, attrs, opset):
    """STFT of frames of a length known at import (``frame_length`` a
    constant, or the window's length), stepped by ``frame_step`` (known at
    run time is enough: the frames' starts are a Range, whose length is the
    frame count). Each frame, times the window, is transformed as DFT."""
    bb = importer.bb
    signal = inputs[0]
    window = inputs[2] if len(inputs) > 2 and not absent(importer, inputs[2]) else None
    length = inputs[3] if len(inputs) > 3 and not absent(importer, inputs[3]) else None
    if length is not None:
        known = const_value(importer, length)
        if known is None:
            raise UnsupportedOnnxOp("STFT with frame_length given at run time is not supported", {"STFT": []})
        frame = int(np.asarray(known).reshape(()))
    elif window is not None and window.ty.shape is not None and isinstance(window.ty.shape.values[0],
                                                                              tvm.tirx.IntImm):
        frame = int(window.ty.shape.values[0])
    else:
        raise UnsupportedOnnxOp("STFT needs a frame length known at import (frame_length or the window's length)",
                                {"STFT": []})
    dims = signal.ty.shape.values if signal.ty.shape is not None else None
    if dims is None or len(dims) != 3:
        raise ValueError(f"STFT's signal must be [batch, length, 1 or 2], got {signal.ty}")
    if frame < 1:
        raise ValueError(f"STFT's frame length must be positive, got {frame}")
    step = bb.emit(relax.op.reshape(relax.op.astype(inputs[1], "int64"), []))
    last_start = bb.emit(relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr([dims[1] - frame + 1])), []))
    starts = ops.arange(bb, relax.const(0, "int64"), last_start, step, "int64")
    offsets = relax.const(np.arange(frame, dtype=np.int64).reshape(1, -1), "int64")
    positions = bb.emit(relax.op.add(relax.op.expand_dims(starts, 1), offsets))  # [frames, frame]
    frames = bb.emit(relax.op.take(signal, positions, axis=1))  # [batch, frames, frame, parts]
    if window is not None:
        frames = bb.emit(relax.op.multiply(frames, relax.op.reshape(window, [1, 1, frame, 1])))
    return _transform(bb, frames, 2, frame, False, bool(attrs.get("onesided", 1)))
