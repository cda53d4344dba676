"""``shapefn.compile``: a Relax IRModule -> a shapefn Executable.

TVM does what it does well — legalization, fusion, TIR kernel generation —
and shapefn adds what its VM needs: data-dependent ops lowered through the
shape-function registry before legalization, placement of each tensor on
host or device, and bytecode in place of TVM's VM code generation.
"""
from __future__ import annotations

import contextlib
import gc

import tvm
from tvm import relax

from .. import kernel_cache
from ..executable import Executable
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


def lower(mod: tvm.IRModule) -> tvm.IRModule:
    """The Relax passes up to the point where shapefn's codegen takes over
    (TVM's VM goes on with memory planning and VMShapeLower instead)."""
    return tvm.transform.Sequential([
        # Folds match_casts made redundant by lowering (their sizes substituted
        # everywhere); FuseTIR would otherwise drop them and leave sizes undefined.
        relax.transform.CanonicalizeBindings(),
        relax.transform.LegalizeOps(customize_legalize_map=legalize_map()),
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
    ])(mod)


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
    with gc_paused():
        lowered = lower(lower_dynamic_ops(mod))
        codegen = ModuleCodegen(lowered, all_host=(device == "host"))
        program = codegen.run()
        kernels = {gv.name_hint: f for gv, f in lowered.functions.items()
                   if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint in codegen.kernels}
        library, library_path = kernel_cache.build(tvm.IRModule(kernels), tvm_target) if kernels else (None, None)
        exe = program.build(library=library)
    exe._library_path = library_path
    exe.default_dependence = dependence
    return exe
