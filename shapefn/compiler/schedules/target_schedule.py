"""Scheduling kernels for the processor each one runs on: a compiler step
between code generation (which decides where each kernel runs) and the
kernel cache (which compiles what it is given).

What makes a TIR kernel GPU code is its loops bound to GPU threads. TVM
builds a PrimFunc without thread bindings for a GPU target without a word,
as host code that would dereference device pointers; this step makes sure
that never happens.

* CPU targets (``llvm``): shapefn's reduction schedule (``cpu_schedule.py``).
* GPU targets (``GPU_KINDS``): a kernel placed on the device that does all
  its work in GPU threads (shapefn's hand-written GPU forms, picked by
  ``kernel_form`` while lowering) is kept as it is; any other gets TVM's
  default GPU schedules, the dlight rules TVM's own GPU pipelines apply
  (which also bind what a partly bound kernel of TVM's leaves), the first
  rule whose result does all its work in GPU threads. A kernel no rule
  schedules is refused (``SerialKernelError``): its loops would run in one
  GPU thread, serial work at GPU clock speed. Only a kernel without loops (a
  few scalar operations, one launch of one thread) runs in one thread; it
  is listed (``single_thread``).
  A kernel placed on the host (shape arithmetic on host values) is built for
  the host target, with the CPU schedule, in the same library; a GPU form
  names its CPU form for that (``host_form``).
  Reductions of every element to one value get shapefn's own rule
  (``_FullReduction``): one thread block folding the elements, its threads
  combined by TVM's cross-thread reduction, and what follows in the kernel
  spread over the same threads. Kernels of several blocks whose
  bindings TVM's Fallback cannot decompose (softmax over an inner axis of
  a symbolic extent) get ``_ThreadPerOutput``: a GPU thread per output
  element of each block.
* Every device kernel is then checked: a buffer access to memory that is
  not thread-local outside any GPU thread, a host loop around launches of
  one thread (serial work a launch at a time), or a call of a packed
  function (host code), raises
  ``KernelPlacementError`` naming the kernel (``gpu_threads.host_work``).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.s_tir import dlight
from tvm.target import codegen

from ... import _core
from ...runtime import device_kinds
from ..kernels import gpu as gpu_kernels
from . import cpu_schedule
from .gpu_threads import binds_threads, host_work, is_local, serial_loops, writes_nothing

GPU_KINDS = device_kinds.gpu_kinds()
# Part of every GPU build's kernel keys: a change to the rules, the
# single-thread form or the check here rebuilds GPU libraries.
GPU_VERSION = "dlight-default-4"

# The attribute of a GPU kernel form naming its CPU form (``kernel_form``):
# ["module:generator", *arguments], the generator one of ``_CPU_FORMS``.
HOST_FORM = "shapefn.host_form"
# The CPU forms of the kernels that have a GPU form, by the name their GPU
# forms' HOST_FORM gives (``kernel_form`` adds each as it pairs them).
_CPU_FORMS: dict[str, Callable[..., tirx.PrimFunc]] = {}

# Blocks lowered to plain loops and buffers, for kernels that get the
# single-thread form (the rest of TVM's pipeline runs when they are built).
_LOWER_BLOCKS = (s_tir.transform.LowerInitBlock, s_tir.transform.ConvertBlocksToOpaque,
                 s_tir.transform.CompactBufferAllocation, s_tir.transform.LowerMatchBuffer,
                 s_tir.transform.LowerOpaqueBlock)


class KernelPlacementError(RuntimeError):
    """A kernel placed where it cannot run: on a GPU device, one that would
    do work on the host; on the host, one written for GPU threads only."""


class SerialKernelError(KernelPlacementError):
    """A device kernel with no parallel GPU schedule: its loops would run in
    one GPU thread."""


@dataclass(frozen=True)
class ScheduledKernels:
    """The kernels of one build, scheduled: ``module`` (the PrimFuncs under
    their names; for a GPU target each carries its ``target``: the device's,
    or the host's for kernels run on the host), ``version`` (what the kernel
    cache keys them with) and ``single_thread`` (device kernels without
    loops, launched as one GPU thread)."""
    module: tvm.IRModule
    version: str
    single_thread: tuple[str, ...] = ()


def is_gpu(target: tvm.target.Target) -> bool:
    return target.kind.name in GPU_KINDS


def device_code(target: tvm.target.Target) -> str:
    """What the kernels of a build for ``target`` run on, as executables
    record it: "cpu" (the host and sim devices) or the GPU kind ("cuda", ...)."""
    return target.kind.name if is_gpu(target) else "cpu"


HOST_CPU_ENV = "SHAPEFN_HOST_CPU"
HOST_OPT_LEVEL_ENV = "SHAPEFN_HOST_OPT_LEVEL"


def host_target() -> tvm.target.Target:
    """The target of host kernels: LLVM for the CPU this process runs on
    (as ``-march=native``: its vector width and instructions), or for the
    LLVM CPU ``SHAPEFN_HOST_CPU`` names (``x86-64-v3``, ``skylake``...) to
    build executables for other machines (read on every call).
    ``SHAPEFN_HOST_OPT_LEVEL`` (0-3, read on every call) sets LLVM's
    optimization level: 0 builds several times faster and runs slower, for
    compiles whose kernels run little (a test suite's); unset, LLVM's
    default (3)."""
    return _llvm_for(os.environ.get(HOST_CPU_ENV) or codegen.llvm_get_system_cpu(),
                     os.environ.get(HOST_OPT_LEVEL_ENV, ""))


@functools.lru_cache
def _llvm_for(cpu: str, opt_level: str) -> tvm.target.Target:
    if not codegen.llvm_is_valid_cpu(cpu, codegen.llvm_get_system_triple()):
        raise ValueError(f"{HOST_CPU_ENV}={cpu!r} is not a CPU LLVM knows (e.g. x86-64-v2, x86-64-v3, skylake)")
    config = {"kind": "llvm", "mcpu": cpu}
    if opt_level:
        if opt_level not in ("0", "1", "2", "3"):
            raise ValueError(f"{HOST_OPT_LEVEL_ENV}={opt_level!r} is not an LLVM optimization level (0, 1, 2 or 3)")
        config["opt-level"] = int(opt_level)
    return tvm.target.Target(config)


def host_cpu_features(target: tvm.target.Target) -> list[str]:
    """The instruction-set features the host code of a build for ``target``
    may use, among those a VM checks before running it."""
    host = target.host if is_gpu(target) and target.host is not None else target
    if host.kind.name != "llvm":
        return []
    return sorted(set(codegen.llvm_get_cpu_features(host)) & set(_core.checkable_cpu_features()))


def version(target: tvm.target.Target) -> str:
    """The version of the schedules applied for ``target``."""
    # (a GPU build schedules its host kernels for the CPU)
    return f"{GPU_VERSION}+{cpu_schedule.VERSION}" if is_gpu(target) else cpu_schedule.VERSION


def kernel_form(cpu_form: Callable[..., tirx.PrimFunc], gpu: bool) -> Callable[..., tirx.PrimFunc]:
    """The generator of a shapefn kernel for the target: for a GPU target,
    ``cpu_form``'s namesake in ``kernels.gpu`` (same parameters and buffer
    signature, thread bindings of its own) when there is one, its kernels
    naming their CPU form (``HOST_FORM``) for a copy placed on the host;
    else ``cpu_form`` (which, on a GPU, gets the single-thread form).
    Arguments are positional, ints, strings and bools."""
    gpu_form = getattr(gpu_kernels, cpu_form.__name__, None) if gpu else None
    if gpu_form is None:
        return cpu_form
    generator = f"{cpu_form.__module__}:{cpu_form.__qualname__}"
    _CPU_FORMS[generator] = cpu_form

    def both_forms(*args) -> tirx.PrimFunc:
        # Named, not held: a PrimFunc in an attribute defeats TVMScript's printer.
        return gpu_form(*args).with_attr(HOST_FORM, [generator, *args])

    return both_forms


def host_form(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """``func`` as the host runs it: the CPU form a GPU form names, ``func``
    itself if it binds no GPU threads, else None (no host build)."""
    named = func.attrs.get(HOST_FORM) if func.attrs is not None else None
    if named is not None:
        generator = _CPU_FORMS.get(str(named[0]))
        if generator is None:
            raise KeyError(f"a GPU kernel names CPU form {str(named[0])!r}, which kernel_form never paired")
        return generator(*list(named)[1:])
    return None if binds_threads(func) else func


def schedule(kernels: Mapping[str, tirx.PrimFunc], target: tvm.target.Target,
             host: Collection[str] = ()) -> ScheduledKernels:
    """``kernels`` (name -> PrimFunc) scheduled for ``target``, each exported
    under its name; ``host`` names those that run on the host (all of them,
    for a CPU target)."""
    if not is_gpu(target):
        funcs = {name: _host_kernel(name, func) for name, func in kernels.items()}
        return ScheduledKernels(tvm.IRModule(funcs), version(target))
    cpu = target.host if target.host is not None else host_target()
    funcs, single_thread = {}, []
    for name, func in kernels.items():
        if name in host:
            funcs[name] = _host_kernel(name, func).with_attr("target", cpu)
            continue
        func, alone = _device_kernel(name, func.without_attr(HOST_FORM), target)
        funcs[name] = func.with_attr("target", target).with_attr("global_symbol", name)
        if alone:
            single_thread.append(name)
    return ScheduledKernels(tvm.IRModule(funcs), version(target), tuple(single_thread))


def _host_kernel(name: str, func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func``'s host form with the CPU schedule, exported as ``name``."""
    form = host_form(func)
    if form is None:
        raise KernelPlacementError(f"kernel '{name}' binds GPU threads and has no host form; it cannot run on the host")
    return cpu_schedule.schedule(form.with_attr("global_symbol", name))


def _device_kernel(name: str, func: tirx.PrimFunc, target: tvm.target.Target) -> tuple[tirx.PrimFunc, bool]:
    """``func`` scheduled for the device, and whether it got the
    single-thread form (a kernel without loops); raises
    ``KernelPlacementError`` if it cannot run there, ``SerialKernelError``
    if it has loops and no parallel schedule."""
    alone = False
    if writes_nothing(func):  # (an empty output: a split's empty part; no thread has work)
        return func.with_body(tirx.Evaluate(0)), alone
    problems = host_work(func)
    if problems:  # (a kernel written for GPU threads has none: it is kept as written)
        func = _without_dtype_limits(func)
        scheduled = _dlight(func, target)
        if scheduled is not None and not host_work(scheduled):
            func = scheduled
        elif not binds_threads(func):  # (one thread cannot launch more)
            func, alone = _single_thread(name, func), True
        problems = host_work(func)
    if problems:
        shown = "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")
        raise KernelPlacementError(f"kernel '{name}' cannot run on the {target.kind.name} device: it {shown}")
    loops = serial_loops(func) if alone else 0
    if loops:
        raise SerialKernelError(
            f"kernel '{name}' has no parallel {target.kind.name} schedule: {loops} of its loops would run "
            "in one GPU thread. Compile for the CPU, or give the kernel a GPU form (compiler/kernels/gpu.py)")
    return func, alone


# _dlight's results in this process: (structural hash, target) -> [(kernel,
# scheduled or None)], at most _SCHEDULED_KEPT kernels. Models of one family
# share most kernels (a backbone, a head), and trying TVM's rules on a kernel
# is most of the time a GPU compile spends scheduling.
_SCHEDULED_KEPT = 4096
_scheduled: dict[tuple[int, str], list[tuple[tirx.PrimFunc, tirx.PrimFunc | None]]] = {}


def _dlight(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc | None:
    """``func`` under the first of TVM's default GPU rules that schedules
    it with all its work in GPU threads, or None. Like
    ``dlight.ApplyDefaultSchedule``, except that a rule that fails on the
    kernel (some assert on shapes they do not expect) or leaves work on the
    host (GeneralReduction's host loop of one-thread launches) passes it on
    to the next instead. A kernel structurally equal to one scheduled
    before (names aside) gets that one's result."""
    if not isinstance(func.body, s_tir.SBlockRealize):
        return None  # the rules need blocks
    unnamed = func.without_attr("global_symbol")
    key = (tvm_ffi.structural_hash(unnamed), str(target))
    for seen, scheduled in _scheduled.get(key, ()):
        if tvm_ffi.structural_equal(unnamed, seen):
            return scheduled
    scheduled = _dlight_rules(func, target)
    if sum(len(entries) for entries in _scheduled.values()) >= _SCHEDULED_KEPT:
        _scheduled.clear()
    _scheduled.setdefault(key, []).append((unnamed, scheduled))
    return scheduled


def _dlight_rules(func: tirx.PrimFunc, target: tvm.target.Target) -> tirx.PrimFunc | None:
    """``_dlight``'s result, from the rules."""
    # (_FullReduction first: GeneralReduction takes full reductions too, and
    # launches a one-thread kernel per element from a host loop.)
    rules = (_FullReduction(), dlight.gpu.Matmul(), _ShortReduction(), dlight.gpu.GEMV(), dlight.gpu.Reduction(),
             dlight.gpu.GeneralReduction(), dlight.gpu.Fallback(), _ThreadPerOutput())
    with target:
        for rule in rules:
            try:
                space = rule.apply(func, target, False)
            except Exception:  # noqa: BLE001 - a rule that does not fit; the next may
                continue
            if space is None:
                continue
            sch = space[0] if isinstance(space, list) else space
            scheduled = sch.mod["main"]
            if not host_work(scheduled):
                return scheduled.with_attr("tirx.is_scheduled", True)
    return None


class _FullReduction:
    """Reductions of every element to one value (``x.max()``), which no
    dlight rule schedules well: GeneralReduction and Fallback put a unit
    thread loop inside the reduction loops, so the host would launch one
    thread per element. Here
    the reduction runs in one thread block: each of ``THREADS`` threads folds
    a strided part of the elements, then the threads combine their values
    (TVM lowers a reduction over a thread-bound loop to a cross-thread
    all-reduce, whose result every thread holds); the blocks after it run in
    the same launch, their elements spread over the same threads."""

    THREADS = 256

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, tunable: bool):
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock(func.body.block.name_hint))
        if not blocks or not _reduces_everything(sch, blocks[0]):
            return None
        reduction = blocks[0]
        steps, lane = sch.split(sch.fuse(*sch.get_loops(reduction)), [None, self.THREADS])
        sch.reorder(lane, steps)
        launch = sch.add_unit_loop(lane)
        sch.bind(launch, "blockIdx.x")
        sch.bind(lane, "threadIdx.x")
        sch.set_scope(reduction, 0, "local")
        epilogue = blocks[1:]
        for block in epilogue[:-1]:  # intermediates: inlined, or scalars every thread computes
            try:
                sch.compute_inline(block)
                epilogue.remove(block)
            except s_tir.ScheduleError:
                if sch.get_loops(block):
                    return None  # (its elements would be exchanged between threads)
                sch.set_scope(block, 0, "local")
        for block in epilogue:  # (in order: each one's producers are in the launch before it)
            sch.reverse_compute_at(block, launch)
            loops = sch.get_loops(block)[1:]
            if loops:
                _, threads = sch.split(sch.fuse(*loops), [None, self.THREADS])
                sch.bind(threads, "threadIdx.x")
        return sch


class _ShortReduction:
    """A kernel whose one reduction folds a few elements into each output
    (a depthwise convolution: 9 or 25), with elementwise blocks around it:
    a thread per output (TVM's Fallback, or ``_ThreadPerOutput``). The
    reduction rules would spread those few elements over a thread block
    and leave most of its threads idle: on an H200, SSD-lite's depthwise
    convolutions took up to 1.4 ms each under GeneralReduction."""

    LIMIT = 64  # elements folded into each output, at most

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, tunable: bool):
        infos = dlight.analysis.normalize_prim_func(s_tir.Schedule(func))
        if infos is None:
            return None
        reductions = [info for info in infos if info.is_reduction()]
        if len(reductions) != 1:
            return None
        folded = 1
        for iteration in reductions[0].iters:
            if iteration.kind == "R":
                if not isinstance(iteration.dom, (int, tirx.IntImm)):  # (dlight gives ints where static)
                    return None
                folded *= int(iteration.dom)
        if folded > self.LIMIT:
            return None
        try:
            return dlight.gpu.Fallback().apply(func, target, tunable)
        except Exception:  # noqa: BLE001 - bindings Fallback cannot decompose
            return _ThreadPerOutput().apply(func, target, tunable)


class _ThreadPerOutput:
    """TVM's Fallback rule (each block's spatial loops fused and spread over
    threads, its reduction loops serial in each thread) without its
    decomposition of reductions into an init and an update block, which
    fails when a block's bindings are not quasi-affine (extents that are
    sums of quotients of symbolic sizes); the init stays in the block."""

    def apply(self, func: tirx.PrimFunc, target: tvm.target.Target, tunable: bool):
        sch = s_tir.Schedule(func)
        infos = dlight.analysis.normalize_prim_func(sch)
        if infos is None:
            return None
        threads = dlight.base.max_threads_per_block(target)
        for info in dlight.base.try_inline(sch, infos):
            block = info.block_rv
            loops = sch.get_loops(block)
            if any(sch.get(loop).thread_binding is not None for loop in loops):
                continue
            kinds = {"S": [], "R": [], "O": []}
            for loop, kind in zip(loops, info.dom_kind()):
                kinds[kind].append(loop)
            spatial = kinds["S"] or [sch.add_unit_loop(block)]
            sch.reorder(*spatial, *kinds["R"], *kinds["O"])
            outer, inner = sch.split(sch.fuse(*spatial), [None, threads])
            sch.bind(outer, "blockIdx.x")
            sch.bind(inner, "threadIdx.x")
        return sch


def _reduces_everything(sch: s_tir.Schedule, block) -> bool:
    """Whether every iteration variable of ``block`` is a reduction one (it
    writes a single value) and it has loops to spread over threads."""
    iter_vars = sch.get(block).iter_vars
    return bool(iter_vars) and bool(sch.get_loops(block)) and all(
        v.iter_type == tirx.IterVar.CommReduce for v in iter_vars)


def _without_dtype_limits(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with ``min(x, <largest value of x's type>)`` written ``x``
    (and ``max`` with the smallest likewise). Slices to the end (ONNX's
    ``INT64_MAX`` ends) leave such extents, and TVM fails to build their GPU
    schedules: its simplifier folds ``INT64_MAX + 255`` (a thread block's
    rounding) into an int64 literal, which overflows."""

    def fold(node):
        largest = isinstance(node, tirx.Min)
        if _is_limit(node.a, largest):
            return node.b
        if _is_limit(node.b, largest):
            return node.a
        return node

    return func.with_body(tvm_ffi.structural_map(func.body, [((tirx.Min, tirx.Max), fold)]))


def _is_limit(expr, largest: bool) -> bool:
    """Whether ``expr`` is the largest (or smallest) value of its integer type."""
    if not isinstance(expr, tirx.IntImm):
        return False
    dtype = str(expr.ty.dtype)
    if not dtype.startswith("int"):
        return False
    bits = int(dtype[3:] or 32)
    return expr.value == ((1 << (bits - 1)) - 1 if largest else -(1 << (bits - 1)))


def _single_thread(name: str, func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func``'s whole body as one GPU thread of one block. Its global
    allocations move in front of the launch, where TVM makes them device
    workspace (a kernel cannot allocate global memory); shape assertions
    before the first statement that does work stay on the host."""
    if isinstance(func.body, s_tir.SBlockRealize):
        lowered = tvm.transform.Sequential([p() for p in _LOWER_BLOCKS])(tvm.IRModule({"main": func}))
        func = lowered["main"]
    body = func.body
    statements = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    params = _param_vars(func)
    prologue, kernel = [], []
    for stmt in statements:
        if isinstance(stmt, tirx.AllocBuffer) and not is_local(stmt.buffer.scope()):
            if not _uses_only(stmt.buffer.shape, params):
                raise KernelPlacementError(f"kernel '{name}' allocates {stmt.buffer.name or 'a buffer'} with a size "
                                        "computed inside it; it cannot run in one GPU thread")
            prologue.append(stmt)
        elif not kernel and (isinstance(stmt, tirx.DeclBuffer)
                             or isinstance(stmt, tirx.AssertStmt) and not _reads_buffers(stmt)):
            prologue.append(stmt)
        else:
            kernel.append(stmt)
    if _allocates_global(kernel):
        raise KernelPlacementError(f"kernel '{name}' allocates global memory inside a loop or branch; "
                                "it cannot run in one GPU thread")
    launch = _thread("blockIdx.x", _thread("threadIdx.x", kernel[0] if len(kernel) == 1 else tirx.SeqStmt(kernel)))
    return func.with_body(tirx.SeqStmt([*prologue, launch]) if prologue else launch)


def _thread(tag: str, body: tirx.Stmt) -> tirx.Stmt:
    """``body`` under a launch of one ``tag`` thread."""
    iter_var = tirx.IterVar(ir.Range(0, 1), tirx.Var(tag, "int32"), tirx.IterVar.ThreadIndex, tag)
    return tirx.AttrStmt(iter_var, "thread_extent", tirx.IntImm("int32", 1), body)


def _param_vars(func: tirx.PrimFunc) -> set[int]:
    """The variables defined on entry (their handles): parameters and the
    shapes and strides of parameter buffers."""
    defined = set()
    for param in func.params:
        defined.add(param.__chandle__())
        buffer = param.ty  # a BufferType for a buffer parameter
        layout = [*getattr(buffer, "shape", ()), *getattr(buffer, "strides", ()), getattr(buffer, "elem_offset", None)]
        for expr in layout:
            if isinstance(expr, tirx.Var):
                defined.add(expr.__chandle__())
    return defined


def _uses_only(exprs, defined: set[int]) -> bool:
    used = []
    for expr in exprs:
        tvm_ffi.structural_walk(expr, [(tirx.Var, used.append)])
    return all(var.__chandle__() in defined for var in used)


def _reads_buffers(stmt: tirx.Stmt) -> bool:
    loads = []
    tvm_ffi.structural_walk(stmt, [(ir.TensorLoad, loads.append)])
    return bool(loads)


def _allocates_global(stmts: list[tirx.Stmt]) -> bool:
    found = []

    def alloc(node):
        if not is_local(node.buffer.scope()):
            found.append(node)

    for stmt in stmts:
        tvm_ffi.structural_walk(stmt, [(tirx.AllocBuffer, alloc)])
    return bool(found)
