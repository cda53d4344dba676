"""``shapefn.compile``: a Relax IRModule -> a shapefn Executable.

TVM does what it does well — legalization, fusion, TIR kernel generation —
and shapefn adds what its VM needs: data-dependent ops lowered through the
shape-function registry before legalization, placement of each tensor on
host or device, and bytecode in place of TVM's VM code generation.

The steps: lower data-dependent ops (``lower_dynamic.py``) -> TVM's Relax
passes (``lower``) -> host parameters of loops (``host_params.py``) ->
codegen, which places every tensor and kernel on host
or device (``codegen.py``, ``placement.py``) -> scheduling each kernel for
the processor it runs on (``target_schedule.py``) -> the kernel cache, which
compiles and links them (``kernel_cache.py``).
"""
from __future__ import annotations

import contextlib
import gc

import tvm
from tvm import relax

from .. import kernel_cache
from ..executable import Executable
from . import host_params, target_schedule
from .codegen import ModuleCodegen
from .fold_constants import fold_constant_kernels
from .lower_dynamic import lower_dynamic_ops
from .legalize import legalize_map

_HOST_TARGET = "llvm"


def _target_for(device: str, target) -> tvm.target.Target:
    if target is not None:
        return target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if device in ("sim", "host", "cpu"):
        return tvm.target.Target(_HOST_TARGET)
    kind = device.split(":")[0]
    return tvm.target.Target(kind, host=_HOST_TARGET)


def lower(mod: tvm.IRModule, target: tvm.target.Target | None = None) -> tvm.IRModule:
    """The Relax passes up to the point where shapefn's codegen takes over
    (TVM's VM goes on with memory planning and VMShapeLower instead), for
    kernels of ``target`` (default: the CPU)."""
    target = target if target is not None else tvm.target.Target(_HOST_TARGET)
    # Some of TVM's legalizations (and shapefn's) depend on the target: they
    # read it from the context.
    with target:
        return _passes(target_schedule.is_gpu(target))(mod)


def _passes(gpu: bool) -> tvm.transform.Pass:
    return tvm.transform.Sequential([
        # Folds match_casts made redundant by lowering (their sizes substituted
        # everywhere); FuseTIR would otherwise drop them and leave sizes undefined.
        relax.transform.CanonicalizeBindings(),
        relax.transform.LegalizeOps(customize_legalize_map=legalize_map(gpu)),
        relax.transform.AnnotateTIROpPattern(),
        tvm.transform.module_pass(lambda m, _: fold_constant_kernels(m), opt_level=0, name="FoldConstantKernels"),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        relax.transform.CallTIRRewrite(),
        relax.transform.KillAfterLastUse(),
        relax.transform.AttachGlobalSymbol(),
    ])


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration (and back to
    its previous state after). A compile allocates Python objects in
    proportion to the graph, and each collection of the older generations
    walks all of them: compiling 20k ops ran 1,482 collections, 6 of them
    full, and took 10-20% longer in codegen and TVM's passes with them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile(mod: tvm.IRModule, device: str = "sim", *, target=None,
            dependence: str = "per-input") -> Executable:  # noqa: A001 - the public name
    """Compiles a Relax module (entry ``main``) for ``device``: "sim", "host"
    or a TVM device name such as "cuda"; ``target`` overrides the kernel
    target. ``dependence`` is the default mode of VMs made from the result
    ("per-op" reproduces whole-tensor copies, for comparison)."""
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"shapefn.compile takes a tvm.IRModule, got {type(mod).__name__}")
    if "main" not in [gv.name_hint for gv in mod.functions]:
        raise ValueError("the module has no 'main' function")
    if dependence not in ("per-input", "per-op"):
        raise ValueError(f"dependence must be 'per-input' or 'per-op', got {dependence!r}")
    tvm_target = _target_for(device, target)
    gpu = target_schedule.is_gpu(tvm_target)
    with gc_paused():
        lowered = lower(lower_dynamic_ops(mod, gpu), tvm_target)
        all_host = device == "host"
        host = host_params.plan(lowered, all_host)
        lowered = host_params.read_back_host_params(lowered, host)
        codegen = ModuleCodegen(lowered, all_host=all_host, separate_host_kernels=gpu, host_params=host)
        program = codegen.run()
        library, library_path = build_kernels(lowered, codegen, tvm_target)
        exe = program.build(library=library)
    exe._library_path = library_path
    exe.default_dependence = dependence
    return exe


def build_kernels(lowered: tvm.IRModule, codegen: ModuleCodegen, target: tvm.target.Target):
    """The library of the PrimFuncs the program invokes (each scheduled for
    the processor codegen placed it on) and its file; (None, None) if none."""
    if not codegen.kernels:
        return None, None
    kernels = {name: lowered[func] for name, func in codegen.kernels.items()}
    scheduled = target_schedule.schedule(kernels, target, host=codegen.host_kernels)
    return kernel_cache.build(scheduled.module, target, scheduled.version)
