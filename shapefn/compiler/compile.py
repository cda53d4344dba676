"""``shapefn.compile``: a Relax IRModule -> a shapefn Executable.

TVM does what it does well — legalization, fusion, TIR kernel generation —
and shapefn adds what its VM needs: data-dependent ops lowered through the
shape-function registry before legalization, placement of each tensor on
host or device, and bytecode in place of TVM's VM code generation.

``compile`` is the pipeline, one pass per line; each pass is a module with
one job and its own tests (docs/compiler.md lists them).
"""
from __future__ import annotations

import contextlib
import gc

import tvm

from ..runtime.executable import Executable
from ..runtime.progress import QUIET, Progress
from . import interrupts
from .build_target import BuildTarget
from .codegen import bytecode as codegen
from .machine_code import cuda_fatbin, kernel_cache
from .passes import host_params, index_checks, placement, readback_order
from .passes.lower_dynamic import lower_dynamic_ops
from .passes.relax_passes import lower
from .schedules import target_schedule

__all__ = ["build_kernels", "compile", "gc_paused", "lower", "lower_dynamic_ops", "schedule_kernels",
           "scheduled_kernels"]


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration (and back to
    its previous state after). A compile allocates Python objects in
    proportion to the graph, and each collection of the older generations
    walks all of them, which makes large compiles measurably slower
    (docs/bench/compiler.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile(mod: tvm.IRModule, device: str = "sim", *, target=None,  # noqa: A001 - the public name
            dependence: str = "per-input", progress=False, cuda_archs=None) -> Executable:
    """Compiles a Relax module (entry ``main``) for ``device``: "sim",
    "host", "opencl", "cuda" or another kind of ``runtime/device_kinds.py``
    (optionally with ":<index>"); ``target`` overrides the kernel
    target. ``dependence`` is the default mode of VMs made from the result
    ("per-op" reproduces whole-tensor copies, for comparison). ``progress``
    prints the phases and a bar over the kernels built to stderr: True,
    False, or "auto" (when stderr is a terminal). ``cuda_archs`` names the
    GPU architectures a CUDA build carries machine code for (e.g.
    ``["sm_90"]``); by default the target's ``arch`` if it names one, else
    ``cuda_fatbin.DEFAULT_ARCHITECTURES`` and this machine's GPU's."""
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"shapefn.compile takes a tvm.IRModule, got {type(mod).__name__}")
    if "main" not in [gv.name_hint for gv in mod.functions]:
        raise ValueError("the module has no 'main' function")
    if dependence not in ("per-input", "per-op"):
        raise ValueError(f"dependence must be 'per-input' or 'per-op', got {dependence!r}")
    report = Progress.of(progress)
    build = BuildTarget.of(device, target)
    tvm_target = build.target
    if tvm_target.kind.name == "cuda":
        cuda_archs = cuda_fatbin.architectures(tvm_target, cuda_archs)  # (a bad name fails before the compile)
    elif cuda_archs is not None:
        raise ValueError(f"cuda_archs is for CUDA builds; this one is for {tvm_target.kind.name}")
    with interrupts.kept(), gc_paused():
        generated, scheduled = _generate(mod, build, report)
        with report.phase("building kernels"):
            library, library_path = build_kernels(scheduled, tvm_target, report, cuda_archs)  # via the kernel cache
        return generated.program.build(library=library, library_path=library_path, default_dependence=dependence,
                                       host_cpu_features=target_schedule.host_cpu_features(tvm_target),
                                       device_code=target_schedule.device_code(tvm_target) if library else "")


def _generate(mod: tvm.IRModule, build: BuildTarget, report: Progress):
    """The bytecode and the scheduled kernels of ``mod`` for ``build``."""
    with report.phase("lowering data-dependent ops"):
        mod = lower_dynamic_ops(mod, build.gpu)                # data-dependent ops -> shape functions
    with report.phase("TVM's Relax passes"):
        mod = lower(mod, build.target)                         # TVM's Relax passes, shapefn's legalizations
    with report.phase("placement and bytecode"):
        host = host_params.plan(mod, build.policy)             # loops' tensors read only for shapes
        mod = host_params.read_back_host_params(mod, host)
        places = placement.place_module(mod, build.policy, host)  # host or device, per tensor and kernel
        readbacks = readback_order.order_module(mod)            # readbacks batched, one sync per phase
        generated = codegen.generate(mod, places, readbacks, separate_host_kernels=build.gpu)  # bytecode
    with report.phase("scheduling kernels"):
        scheduled = schedule_kernels(mod, generated, build.target)  # each kernel for its processor
    return generated, scheduled


def scheduled_kernels(mod: tvm.IRModule, device: str) -> target_schedule.ScheduledKernels | None:
    """The kernels ``compile(mod, device)`` builds, scheduled, without
    building them (None if none): what a check of a build for a device this
    machine has no compiler or driver for can inspect. Raises as
    ``compile`` does for a kernel that cannot run where it is placed."""
    with gc_paused():
        return _generate(mod, BuildTarget.of(device), QUIET)[1]


def schedule_kernels(mod: tvm.IRModule, generated: codegen.GeneratedProgram,
                     target: tvm.target.Target) -> target_schedule.ScheduledKernels | None:
    """The PrimFuncs the program invokes, under the names it invokes them
    by, scheduled for the processor codegen placed each on (None if none)."""
    if not generated.kernels and not generated.shape_func_kernels:
        return None
    kernels = {name: mod[func] for name, func in generated.kernels.items()}
    kernels.update(generated.shape_func_kernels)
    scheduled = target_schedule.schedule(kernels, target, host=generated.host_kernels)
    for gv, func in list(scheduled.module.functions.items()):  # markers -> checks, after any schedule
        name = gv.name_hint
        numbered = index_checks.checks_of(kernels[name]) if name in kernels else None  # (what codegen numbered)
        scheduled.module[gv] = index_checks.materialize(func, name, numbered)
    return scheduled


def build_kernels(scheduled: target_schedule.ScheduledKernels | None, target: tvm.target.Target,
                  progress: Progress = QUIET, cuda_archs=None):
    """The library of the scheduled kernels and its file; (None, None) if none."""
    if scheduled is None:
        return None, None
    return kernel_cache.build(scheduled.module, target, scheduled.version, progress=progress, cuda_archs=cuda_archs)
