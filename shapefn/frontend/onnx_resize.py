"""shapefn's ONNX converter for Resize of 4-D data to sizes or scales known
only at run time: sizes or scales for some axes (``axes``), the
aspect-ratio policies, and coordinates mapped through the model's scales
(as ONNX maps them). Registered in ``onnx_converters.CONVERTERS`` when
imported (``onnx.py`` imports this module)."""
from __future__ import annotations

import numpy as np
from tvm import relax

from .. import ops
from .onnx_converters import _absent, as_tensor, converter, ndim_of, str_attr


@converter("Resize")
def resize(importer, inputs, attrs, opset):
    """Resize of 4-D data to sizes or scales known only at run time (or
    given as an empty scales tensor beside sizes, as torchvision exports)."""
    if opset < 11:
        return NotImplemented
    bb = importer.bb
    data = inputs[0]
    scales = inputs[2] if len(inputs) > 2 else None
    sizes = inputs[3] if len(inputs) > 3 else None
    if int(attrs.get("antialias", 0)):
        raise ValueError("Resize with antialias=1 is not supported")
    if ndim_of(data) != 4:
        return NotImplemented
    if attrs.get("axes") is not None:
        sizes, scales = (_resize_all_axes(importer, data, value, [int(a) for a in attrs["axes"]], default)
                         for value, default in ((sizes, "shape"), (scales, 1.0)))
    hw_scales = None
    policy = str_attr(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if not _absent(importer, sizes) and policy != "stretch":
        axes = [int(a) % 4 for a in attrs.get("axes", range(4))]
        size, hw_scales = _keep_aspect_ratio(bb, data, as_tensor(bb, sizes, "int64"), axes, policy)
    elif not _absent(importer, sizes):
        size = as_tensor(bb, sizes, "int64")
    elif not _absent(importer, scales):
        # ONNX: output = floor(input * scale), per dimension.
        shape = bb.emit(relax.op.astype(bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(data)))),
                                        "float32"))
        scaled = bb.emit(relax.op.floor(bb.emit(relax.op.multiply(shape, as_tensor(bb, scales, "float32")))))
        size = bb.emit(relax.op.astype(scaled, "int64"))
        # (ONNX maps coordinates through the scales, not the sizes' ratio)
        hw_scales = bb.emit(relax.op.strided_slice(as_tensor(bb, scales, "float32"), axes=[0], begin=[2], end=[4]))
    else:
        raise ValueError("Resize needs scales or sizes")
    hw = bb.emit(relax.op.strided_slice(size, axes=[0], begin=[2], end=[4]))
    return ops.resize2d(
        bb, data, hw, layout="NCHW", method=str_attr(attrs.get("mode"), "nearest"),
        coordinate_transformation_mode=str_attr(attrs.get("coordinate_transformation_mode"), "half_pixel"),
        rounding_method=str_attr(attrs.get("nearest_mode"), "round_prefer_floor"),
        cubic_alpha=float(attrs.get("cubic_coeff_a", -0.75)), cubic_exclude=int(attrs.get("exclude_outside", 0)),
        scales=hw_scales)


def _keep_aspect_ratio(bb, data, sizes, axes, policy: str):
    """Resize's sizes under ``keep_aspect_ratio_policy`` "not_larger" or
    "not_smaller": one scale for ``axes``, the smallest (largest) of the
    sizes' ratios, the sizes ``in * scale`` rounded half up; returns the
    sizes and the height and width scales (coordinates map through them)."""
    if policy not in ("not_larger", "not_smaller"):
        raise ValueError(f"keep_aspect_ratio_policy {policy!r} is not one of stretch, not_larger, not_smaller")
    shape = bb.emit(relax.op.astype(bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(data)))), "float32"))
    ratios = bb.emit(relax.op.divide(bb.emit(relax.op.astype(sizes, "float32")), shape))
    chosen = bb.emit(relax.op.take(ratios, relax.const(np.array(axes, np.int64), "int64"), axis=0))
    scale = bb.emit((relax.op.min if policy == "not_larger" else relax.op.max)(chosen))
    mask = relax.const(np.array([a in axes for a in range(4)]), "bool")
    scales = bb.emit(relax.op.where(mask, scale, relax.const(1.0, "float32")))
    rounded = bb.emit(relax.op.floor(bb.emit(relax.op.add(bb.emit(relax.op.multiply(shape, scales)),
                                                           relax.const(0.5, "float32")))))
    size = bb.emit(relax.op.astype(bb.emit(relax.op.where(mask, rounded, shape)), "int64"))
    return size, bb.emit(relax.op.strided_slice(scales, axes=[0], begin=[2], end=[4]))


def _resize_all_axes(importer, data, values, axes, default):
    """Resize's sizes or scales given for ``axes`` only, for every axis: the
    others keep their size (``default`` "shape") or a scale of 1."""
    if _absent(importer, values):
        return values
    bb = importer.bb
    rank = ndim_of(data)
    axes = [a % rank for a in axes]
    given = as_tensor(bb, values, "int64" if default == "shape" else "float32")
    if default == "shape":
        kept = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(data))))
    else:
        kept = relax.const(np.ones(rank, np.float32), "float32")
    pick = [rank + axes.index(a) if a in axes else a for a in range(rank)]
    both = bb.emit(relax.op.concat([kept, given], axis=0))
    return bb.emit(relax.op.take(both, relax.const(np.array(pick, np.int64), "int64"), axis=0))
