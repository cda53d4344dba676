"""TVM's Relax passes, up to where shapefn's code generation takes over:
legalization (with shapefn's legalizations, ``legalize.py``), constant
folding (``fold_constants.py``), fusion and the rewrites that leave kernels
as PrimFunc calls on tensors allocated just before, with kills after last
uses. TVM's VM goes on with memory planning and VMShapeLower instead.
"""
from __future__ import annotations

import tvm
from tvm import relax

from ..codegen.sources import call_tir_rewrite, fuse_ops
from ..kernels import te_params
from ..schedules import target_schedule
from .dataflow_regions import dataflow_regions
from .fold_constants import fold_constant_kernels, fold_constant_transposes
from .fusion_repairs import (
    deduplicated_kernels,
    injective_kernels,
    kernel_sizes_in_order,
    short_names,
    size_definitions,
    sizes_before_use,
    sizes_in_one_shape,
)
from .legalize import legalize_map
from .rewrites import fewer_kernels, reshapes_as_views


def lower(mod: tvm.IRModule, target: tvm.target.Target | None = None) -> tvm.IRModule:
    """The Relax passes up to the point where shapefn's codegen takes over
    (TVM's VM goes on with memory planning and VMShapeLower instead), for
    kernels of ``target`` (default: the CPU)."""
    target = target if target is not None else target_schedule.host_target()
    # Some of TVM's legalizations (and shapefn's) depend on the target: they
    # read it from the context. The kernels legalization makes from TE take
    # their size parameters in a deterministic order (te_params).
    with target, te_params.in_order():
        return _passes(target_schedule.is_gpu(target))(mod)


def _passes(gpu: bool) -> tvm.transform.Pass:
    return tvm.transform.Sequential([
        # A transposed constant weight as a constant, which legalization packs.
        tvm.transform.module_pass(lambda m, _: fold_constant_transposes(m), opt_level=0,
                                  name="FoldConstantTransposes"),
        # Dataflow blocks between control flow, for FuseOps.
        tvm.transform.module_pass(lambda m, _: dataflow_regions(m), opt_level=0, name="DataflowRegions"),
        # Folds match_casts made redundant by lowering (their sizes substituted
        # everywhere); FuseTIR would otherwise drop them and leave sizes undefined.
        relax.transform.CanonicalizeBindings(),
        # min(count, limit) and the like on sizes, as sizes.
        tvm.transform.module_pass(lambda m, _: fewer_kernels(m, gpu), opt_level=0, name="FewerKernels"),
        relax.transform.LegalizeOps(customize_legalize_map=legalize_map(gpu)),
        relax.transform.AnnotateTIROpPattern(),
        tvm.transform.module_pass(lambda m, _: injective_kernels(m), opt_level=0, name="InjectiveKernels"),
        tvm.transform.module_pass(lambda m, _: fold_constant_kernels(m), opt_level=0, name="FoldConstantKernels"),
        relax.transform.FoldConstant(),
        # TVM's FuseOps, each fused call named after its nodes.
        tvm.transform.module_pass(lambda m, _: _fuse(m), opt_level=0, name="FuseOps"),
        relax.transform.FuseTIR(),
        tvm.transform.module_pass(lambda m, _: kernel_sizes_in_order(m), opt_level=0, name="KernelSizesInOrder"),
        tvm.transform.module_pass(lambda m, _: deduplicated_kernels(m), opt_level=0, name="DeduplicateKernels"),
        relax.transform.DeadCodeElimination(),
        tvm.transform.module_pass(lambda m, _: reshapes_as_views(m), opt_level=0, name="ReshapesAsViews"),
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(),
        # TVM's CallTIRRewrite, each call keeping what it was generated for.
        tvm.transform.module_pass(lambda m, _: call_tir_rewrite(m), opt_level=0, name="CallTIRRewrite"),
        relax.transform.KillAfterLastUse(),
        relax.transform.AttachGlobalSymbol(),
    ])


def _fuse(mod: tvm.IRModule) -> tvm.IRModule:
    """TVM's ``FuseOps`` (each fused call named after its nodes), and the
    repairs its result needs (``fusion_repairs``)."""
    definitions = size_definitions(mod)
    return sizes_before_use(short_names(sizes_in_one_shape(fuse_ops(mod))), definitions)


def without_fusion(instruments=()) -> tvm.transform.PassContext:
    """The current pass context (with ``instruments`` added) and TVM's cap on
    a fused group's size at one operation: each operation its own kernel
    (shapefn fuses the pure operations of a function whether or not they are
    in a dataflow block)."""
    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=current.opt_level, required_pass=current.required_pass,
                                     disabled_pass=current.disabled_pass,
                                     instruments=[*current.instruments, *instruments],
                                     config={**current.config, "relax.FuseOps.max_depth": 1})
