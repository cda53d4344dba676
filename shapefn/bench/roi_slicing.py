"""A VM program modelled on Mask R-CNN's ROI handling: one feature map on the
device, sliced once per region of interest by a dynamic strided slice.

``params="device"``: begin/end/strides are int64 tensors computed by a device
kernel from the ROIs (the shape function needs their values: 96 bytes each
slice cross to the host). ``params="host"``: the ROIs live on the host and the
parameters are computed in shape registers (nothing crosses).
"""
from __future__ import annotations

import numpy as np

from ..compiler import hand_built as kernels
from ..runtime.builder import Param, ProgramBuilder
from ..runtime.executable import Executable

_libraries: dict = {}


def kernel_library(target: str = "llvm"):
    """The kernels of this program for ``target``, compiled once per process."""
    if target not in _libraries:
        _libraries[target] = kernels.build({
            "roi_params": kernels.roi_params(),
            "strided_slice": kernels.strided_slice(4),
            "strided_slice_scalar": kernels.strided_slice_scalar(4),
        }, target)
    return _libraries[target]


def build(num_rois: int, params: str = "device", target: str = "llvm") -> Executable:
    """``main(fmap: float32[n, c, h, w], rois: int64[num_rois, 5])`` returning
    the tuple of ``num_rois`` slices ``fmap[i:i+1, :, y0:y1, x0:x1]``, its
    kernels compiled for ``target`` ("llvm" for host and sim, "opencl", ...)."""
    if params not in ("device", "host"):
        raise ValueError(f"params must be 'device' or 'host', got {params!r}")
    pb = ProgramBuilder()
    fb = pb.function("main", [
        Param("fmap", "float32", ["n", "c", "h", "w"]),
        Param("rois", "int64", [num_rois, 5], device=params),
    ])
    fmap, rois = fb.args
    outs = []
    if params == "device":
        vec4 = fb.shape([4])
        for i in range(num_rois):
            begin, end, strides = (fb.alloc_tensor("device", vec4, "int64") for _ in range(3))
            fb.invoke_kernel(pb.kernel("roi_params"), [rois, fb.load_int(i), begin, end, strides])
            (shape,) = fb.shape_func("relax.dynamic_strided_slice", [fmap, begin, end, strides])
            out = fb.alloc_tensor("device", shape, "float32")
            fb.invoke_kernel(pb.kernel("strided_slice"), [fmap, begin, strides, out])
            outs.append(out)
    else:
        values = fb.reg()
        fb.readback([values], [rois])  # a host tensor: read in place, no copy
        zero, one, everything = fb.load_int(0), fb.load_int(1), fb.load_int(1 << 40)
        strides = fb.shape_make([one, one, one, one])
        for i in range(num_rois):
            image, y0, x0, y1, x1 = (fb.shape_get(values, 5 * i + k) for k in range(5))
            begin = fb.shape_make([image, zero, y0, x0])
            end = fb.shape_make([fb.add(image, one), everything, y1, x1])
            (shape,) = fb.shape_func("relax.dynamic_strided_slice", [fmap, begin, end, strides])
            out = fb.alloc_tensor("device", shape, "float32")
            fb.invoke_kernel(pb.kernel("strided_slice_scalar"), [fmap, out, begin, strides])
            outs.append(out)
    fb.ret(fb.make_tuple(outs))
    return pb.build(library=kernel_library(target))


def make_inputs(num_rois: int, fmap_shape=(64, 256, 56, 56), seed: int = 0):
    """A feature map and ``num_rois`` ROIs of 7..14 pixels (fewer on small
    maps) inside it."""
    rng = np.random.default_rng(seed)
    n, _, h, w = fmap_shape
    fmap = rng.standard_normal(fmap_shape, dtype=np.float32)
    low = np.minimum(7, [h, w])
    size = rng.integers(low, np.minimum(15, [h + 1, w + 1]), size=(num_rois, 2))
    y0 = rng.integers(0, h - size[:, 0] + 1)
    x0 = rng.integers(0, w - size[:, 1] + 1)
    rois = np.stack([np.arange(num_rois) % n, y0, x0, y0 + size[:, 0], x0 + size[:, 1]], axis=1)
    return fmap, rois.astype(np.int64)


def reference(fmap: np.ndarray, rois: np.ndarray) -> list[np.ndarray]:
    """The slices, computed by numpy."""
    return [fmap[b:b + 1, :, y0:y1, x0:x1] for b, y0, x0, y1, x1 in rois]
