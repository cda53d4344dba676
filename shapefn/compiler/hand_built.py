"""TVM-compiled kernels for hand-built VM programs (benchmarks, demo, tests):
a few of the compiler's kernel generators (``compiler/kernels``) and
``build``, which compiles them into a library whose functions the VM calls.
Each generator returns a TIR PrimFunc with symbolic sizes.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping

import tvm
from tvm import tirx

from .kernels import count
from .kernels.elementwise import scale
from .kernels.slicing import roi_params, strided_slice, strided_slice_scalar
from .machine_code import kernel_cache
from .schedules import target_schedule

__all__ = ["build", "nonzero_1d", "roi_params", "scale", "strided_slice", "strided_slice_scalar"]


def build(funcs: Mapping[str, tirx.PrimFunc], target="llvm", host: Collection[str] = ()):
    """Compiles ``{name: PrimFunc}`` into one TVM runtime library, ready to
    run, each kernel scheduled for ``target`` (a GPU target, e.g.
    ``"opencl"``: on the device, but for those named in ``host``; its host
    code is built for the CPU).

    A CPU library is returned as built (it can be exported). A GPU library
    comes through the kernel cache, loaded back from its file: device code
    runs only once the device's runtime has loaded it (shapefn's, for
    OpenCL), and a loaded library cannot be exported again."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if not target_schedule.is_gpu(target):
        return tvm.tirx.build(target_schedule.schedule(funcs, target, host).module, target)
    if target.host is None:
        target = tvm.target.Target(target, host="llvm")
    scheduled = target_schedule.schedule(funcs, target, host)
    library, _ = kernel_cache.build(scheduled.module, target, scheduled.version)
    return library


def nonzero_1d(dtype: str = "float32", gpu: bool = False) -> tirx.PrimFunc:
    """``(x[n], out[1, n], count[])``: the indices of the non-zero elements
    of ``x`` at the front of ``out``, their number in ``count``; for a GPU
    target (``gpu``), the parallel form."""
    return target_schedule.kernel_form(count.nonzero_1d, gpu)(dtype)
