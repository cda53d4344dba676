"""``pipeline(target)``: shapefn's Relax pipeline for ``tvm.compile``, and
``runnable``, which makes its OpenCL result run (see the package's
docstring)."""
from __future__ import annotations

import importlib

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.relax.pipeline import BackendDispatcher

from ..kernels import te_params
from ..passes import index_checks
from ..passes.fusion_repairs import deduplicated_kernels
from ..passes.legalize import legalize_map
from ..passes.lower_dynamic import lower_dynamic_ops
from ..passes.rewrites import reshape_calls_replaced
from ..schedules import target_schedule
from ..shape_calls import SHAPE_FUNC, VIEW
from .host_shapes import PlaceShapeArithmeticOnHost, StorageInScope, StorageOnItsDevice
from .read_counts import ReadCountsTogether

__all__ = ["pipeline", "runnable", "DeduplicateKernels", "ExportKernelsUnderTheirNames", "IndicesClamped",
           "LowerDataDependentOps",
           "PlaceShapeArithmeticOnHost", "ReadCountsTogether", "ScheduleShapefnKernels", "WithoutSizeLimits"]

SHAPE_FUNC_PER_OP = "shapefn.shape_func_per_op"
_CALL_PURE_PACKED = tvm.ir.Op.get("relax.call_pure_packed")


def pipeline(target, dependence: str = "per-input") -> tvm.transform.Pass:
    """The Relax pipeline for ``tvm.compile(mod, target=target,
    relax_pipeline=...)``: shapefn's lowering of data-dependent ops, then
    TVM's default pipeline for ``target``. ``dependence="per-op"`` makes
    every shape function read all its tensor inputs' values, as a per-op
    declaration does (for comparison)."""
    if dependence not in ("per-input", "per-op"):
        raise ValueError(f"dependence must be 'per-input' or 'per-op', got {dependence!r}")
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    gpu = target_schedule.is_gpu(target)
    dispatch, legalize, dataflow_lower, finalize = _default_phases(target)
    passes = [
        LowerDataDependentOps(target, dependence),
        ReadCountsTogether(),
        # shapefn's legalizations where TVM's are wrong or slow with symbolic
        # sizes (broadcast from a runtime 1, resize, concat, scatter); TVM's
        # LegalizeOps then legalizes the rest.
        relax.transform.LegalizeOps(customize_legalize_map=legalize_map(gpu)),
        ExportKernelsUnderTheirNames,
        *([ScheduleShapefnKernels(target)] if gpu else []),
        *dispatch(target),
        *[q for p in legalize(target) for q in _in_place_of_default_schedule(p, target)],
        # (after the schedules: a GPU form of a kernel reads checked indices too)
        IndicesClamped,
        DeduplicateKernels,
        WithoutSizeLimits,
        *[RewriteDataflowReshape if p.info.name == "RewriteDataflowReshape" else p for p in dataflow_lower(target)],
        *[_planned(p) for p in finalize(target)],
    ]

    @tvm.transform.module_pass(opt_level=0, name="shapefn.compiler.relax_vm.pipeline")
    def run(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        # (legalizations and schedules read the target; te_params: kernels
        # made from TE take their sizes in the same order in every process)
        with target, te_params.in_order():
            return tvm.transform.Sequential(passes)(mod)

    return run


def runnable(executable):
    """``executable`` (what ``tvm.compile`` returns) with each OpenCL module
    it imports replaced by the same kernels loaded by shapefn's OpenCL
    runtime, so that it runs in this process: the module TVM's code
    generator makes cannot launch a kernel. Changes ``executable`` in place
    (before a VM is made from it) and returns it."""
    _load_opencl_imports(executable.mod if isinstance(executable, relax.VMExecutable) else executable,
                         tvm_ffi.get_global_func("shapefn.opencl.runnable_module"))
    return executable


def _load_opencl_imports(module, load) -> None:
    imports = list(module.imports)
    for imported in imports:
        _load_opencl_imports(imported, load)
    loaded = [load(m) if m.kind == "opencl" else m for m in imports]
    if all(new.same_as(old) for new, old in zip(loaded, imports)):
        return
    module.clear_imports()
    for imported in loaded:
        module.import_module(imported)


@tvm.transform.module_pass(opt_level=0, name="shapefn.RewriteDataflowReshape")
def RewriteDataflowReshape(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 (a pass, named as TVM's)
    """TVM's ``RewriteDataflowReshape`` (a reshape kernel in a dataflow
    block becomes ``R.reshape``, a view), for modules with shapefn's kernels:
    TVM's pass asks ``has_reshape_pattern`` of every kernel, which fails on
    a kernel not written as blocks (shapefn's ``nonzero``, ``topk``...)."""
    return reshape_calls_replaced(mod, lambda data, ty: relax.op.reshape(data, ty.shape), in_dataflow_only=True)


def _in_place_of_default_schedule(phase: tvm.transform.Pass, target: tvm.target.Target) -> list:
    """TVM's ``ApplyDefaultSchedule`` (run after fusion) becomes shapefn's
    placement of shape arithmetic on the host, then shapefn's scheduling of
    what stays on the device; every other pass is kept."""
    if phase.info.name != "ApplyDefaultSchedule":
        return [phase]
    return [PlaceShapeArithmeticOnHost(target), ScheduleShapefnKernels(target, every=True)]


def _planned(phase: tvm.transform.Pass) -> tvm.transform.Pass:
    """``phase``; TVM's static memory planning is followed by two repairs
    of what it plans: a tensor placed in storage of another device
    (``StorageOnItsDevice``) or in storage allocated inside an ``If``'s
    branch, used after the ``If`` (``StorageInScope``) gets storage of its
    own."""
    if phase.info.name != "StaticPlanBlockMemory":
        return phase
    return tvm.transform.Sequential([phase, StorageOnItsDevice, StorageInScope], name="shapefn.StaticPlanBlockMemory")


def _default_phases(target: tvm.target.Target) -> list:
    """The four phases of TVM's default pipeline for ``target`` (library
    dispatch, legalization, dataflow lowering, finalization), chosen as
    ``relax.get_default_pipeline`` chooses its backend."""
    kind = target.kind.name
    if kind in ("cuda", "rocm"):
        chosen = kind
    elif kind == "metal":
        chosen = "gpu_generic"
    elif kind == "llvm":
        chosen = "cpu_generic"
    elif kind == "opencl" and "adreno" in target.keys:
        chosen = "adreno"
    elif BackendDispatcher.is_gpu_target(target):
        chosen = "gpu_generic"
    else:
        raise ValueError(f"TVM has no default Relax pipeline for target {target}")
    phases = importlib.import_module(f"tvm.relax.backend.{chosen}.pipeline")
    return [phases.library_dispatch_passes, phases.legalize_passes, phases.dataflow_lower_passes,
            phases.finalize_passes]


@tvm.transform.module_pass(opt_level=0, name="shapefn.LowerDataDependentOps")
class LowerDataDependentOps:
    """Data-dependent ops through shapefn's registry (``lower_dynamic``)."""

    def __init__(self, target: tvm.target.Target, dependence: str = "per-input"):
        self.target = target
        self.dependence = dependence

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        with self.target:
            lowered = lower_dynamic_ops(mod, target_schedule.is_gpu(self.target))
        return _with_builtins(lowered, self.dependence)


@tvm.transform.module_pass(opt_level=0, name="shapefn.ExportKernelsUnderTheirNames")
def ExportKernelsUnderTheirNames(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - a pass
    """Every kernel exported under its name in the module. shapefn's kernel
    generators make TE and TIR functions whose symbol is a generic one
    ("main", "resize2d"), which two kernels may share; TVM refuses a module
    with duplicate symbols."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            out[gv] = func.with_attr("global_symbol", gv.name_hint)
    return out


@tvm.transform.module_pass(opt_level=0, name="shapefn.ScheduleShapefnKernels")
class ScheduleShapefnKernels:
    """GPU kernels scheduled as shapefn's compiler schedules them
    (``target_schedule``): kernels already bound to GPU threads (shapefn's
    GPU forms) kept as written, the others given the first of TVM's default
    GPU rules that applies (dlight's Matmul, GEMV, Reduction,
    GeneralReduction, Fallback, as TVM's default pipeline applies them),
    and a kernel no rule schedules run in one GPU thread; each is then
    marked scheduled.

    Before legalization it takes only the kernels TVM's rules cannot take
    (shapefn's: thread-bound, or serial TIR without blocks); with
    ``every=True`` it stands in for TVM's ``ApplyDefaultSchedule``, which
    stops the compile when a rule asserts on a kernel it does not fit
    (Faster R-CNN on OpenCL) where the next rule would schedule it."""

    def __init__(self, target: tvm.target.Target, every: bool = False):
        self.target = target
        self.every = every

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        ours = {gv.name_hint: func for gv, func in mod.functions.items()
                if isinstance(func, tirx.PrimFunc) and not _is_scheduled(func)
                and (self.every or target_schedule.binds_threads(func)
                     or not isinstance(func.body, s_tir.SBlockRealize))}
        if not ours:
            return mod
        scheduled = target_schedule.schedule(ours, self.target).module
        out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs, global_infos=mod.global_infos)
        for name, func in ours.items():
            # (exported under its name, as AttachGlobalSymbol would)
            done = scheduled[name].without_attr("target").with_attr("tirx.is_scheduled", True)
            form = func.attrs.get(target_schedule.HOST_FORM) if func.attrs is not None else None
            # (a GPU form keeps naming its CPU form, for a copy placed on the host)
            out[name] = done if form is None else done.with_attr(target_schedule.HOST_FORM, form)
        return out


def _is_scheduled(func: tirx.PrimFunc) -> bool:
    return func.attrs is not None and bool(func.attrs.get("tirx.is_scheduled", False))


@tvm.transform.module_pass(opt_level=0, name="shapefn.IndicesClamped")
def IndicesClamped(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - a pass
    """Each index a kernel reads from data clamped into range
    (``index_checks.without_checks``): TVM's VM has no check records, so
    an index out of range is not reported there (docs/relax_vm.md)."""
    functions = {gv: index_checks.without_checks(f) if isinstance(f, tirx.PrimFunc) else f
                 for gv, f in mod.functions.items()}
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


@tvm.transform.module_pass(opt_level=0, name="shapefn.DeduplicateKernels")
def DeduplicateKernels(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - a pass
    """Each distinct kernel once (``fusion_repairs.deduplicated_kernels``):
    ``tvm.compile`` builds every kernel of the module."""
    return deduplicated_kernels(mod)


# No tensor has 2**62 elements along an axis.
_UNBOUNDED = 1 << 62


@tvm.transform.module_pass(opt_level=0, name="shapefn.WithoutSizeLimits")
def WithoutSizeLimits(mod: tvm.IRModule, ctx) -> tvm.IRModule:  # noqa: N802 - a pass
    """``mod`` with ``min(x, c)`` written ``x`` where ``c`` is at least
    2**62 (and ``max(x, c)`` where ``c`` is at most -2**62). Slices to the
    end (ONNX's ``INT64_MAX`` ends) leave such sizes; TVM's memory planning
    bounds a size by its constants and overflows int64 computing bytes.
    Runs after legalization, which writes those sizes."""

    def fold(node):
        largest = isinstance(node, tirx.Min)
        for keep, limit in ((node.b, node.a), (node.a, node.b)):
            if not isinstance(limit, tirx.IntImm):
                continue
            if (limit.value >= _UNBOUNDED) if largest else (limit.value <= -_UNBOUNDED):
                return keep
        return node

    return tvm.IRModule({gv: tvm_ffi.structural_map(func, [((tirx.Min, tirx.Max), fold)])
                         for gv, func in mod.functions.items()}, attrs=mod.attrs, global_infos=mod.global_infos)


def _with_builtins(mod: tvm.IRModule, dependence: str) -> tvm.IRModule:
    """``mod`` with shapefn's Relax forms as TVM's VM runs them: a view of an
    upper-bound output becomes ``R.memory.view`` (TVM's memory planning
    knows it aliases its input, and keeps that storage while the view is
    used); with ``dependence="per-op"``, shape functions read every tensor
    input's value."""
    shape_func = SHAPE_FUNC_PER_OP if dependence == "per-op" else SHAPE_FUNC

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call: relax.Call) -> relax.Expr:
            call = super().visit_call_(call)
            if call.op != _CALL_PURE_PACKED or not isinstance(call.args[0], relax.ExternFunc):
                return call
            name = call.args[0].global_symbol
            if name == VIEW:
                return relax.op.memory.view(call.args[1], call.args[2])
            if name == SHAPE_FUNC and shape_func != SHAPE_FUNC:
                return relax.Call(call.op, [relax.ExternFunc(shape_func), *call.args[1:]], call.attrs, call.ty_args)
            return call

    rewrite = Rewrite(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewrite.builder_.update_func(gv, rewrite.visit_expr(func))
    return rewrite.builder_.get()
