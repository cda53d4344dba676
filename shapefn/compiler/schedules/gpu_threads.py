"""What a TIR kernel does in GPU threads and outside them: whether it
launches threads at all (``binds_threads``), the work it leaves to the host
around its launches (``host_work``: what ``target_schedule`` refuses in a
device kernel), whether it writes anything (``writes_nothing``) and how many
loops a one-thread kernel runs (``serial_loops``)."""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

# Packed calls are made by host code through the TVM runtime; a device
# kernel cannot make them (and shapefn cannot tell whether the callee
# expects device memory).
_PACKED_CALLS = frozenset({"tirx.tvm_call_packed", "tirx.tvm_call_cpacked", "tirx.tvm_call_trace_packed",
                           "tirx.tvm_call_packed_lowered", "tirx.tvm_call_cpacked_lowered"})
_THREAD_SCOPES = frozenset({"thread_extent", "virtual_thread"})


def binds_threads(func: tirx.PrimFunc) -> bool:
    """Whether ``func`` launches GPU threads (a GPU kernel as written)."""
    return _launches(func.body)


def _launches(stmt: tirx.Stmt) -> bool:
    """Whether ``stmt`` launches GPU threads."""
    found = []

    def attr(node):
        if node.attr_key in _THREAD_SCOPES:
            found.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    def loop(node):
        if node.kind == tirx.ForKind.THREAD_BINDING:
            found.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(stmt, [(tirx.AttrStmt, attr), (tirx.For, loop)], order="pre")
    return bool(found)


def _one_thread(stmt: tirx.Stmt) -> bool:
    """Whether every launch in ``stmt`` is of one thread in one block: a
    loop around such launches does serial work a launch at a time. (A loop
    of parallel launches, as the steps of a sort across work groups, is a
    GPU algorithm: its trip count grows with the log of the data.)"""
    extents = []

    def attr(node):
        if node.attr_key in _THREAD_SCOPES:
            extents.append(node.value)

    def loop(node):
        if node.kind == tirx.ForKind.THREAD_BINDING:
            extents.append(node.extent)

    tvm_ffi.structural_walk(stmt, [(tirx.AttrStmt, attr), (tirx.For, loop)])
    return all(isinstance(e, tirx.IntImm) and e.value == 1 for e in extents)


def host_work(func: tirx.PrimFunc) -> list[str]:
    """What in a device kernel would run on the host and cannot or should
    not: accesses to memory that is not thread-local outside every GPU
    thread, loops on the host around launches of one thread (serial work a
    launch at a time), and packed calls anywhere."""
    problems = []

    def attr(node):
        return tvm_ffi.WalkResult.SKIP if node.attr_key in _THREAD_SCOPES else None

    def loop(node):
        if node.kind == tirx.ForKind.THREAD_BINDING:
            return tvm_ffi.WalkResult.SKIP
        if _launches(node.body) and _one_thread(node.body):
            problems.append("launches one GPU thread per iteration of a host loop")
            return tvm_ffi.WalkResult.SKIP
        return None

    def load(node):
        if not is_local(node.source.scope()):
            problems.append(f"reads {node.source.name or 'a buffer'} outside any GPU thread (from host code)")

    def store(node):
        if not is_local(node.buffer.scope()):
            problems.append(f"writes {node.buffer.name or 'a buffer'} outside any GPU thread (from host code)")

    tvm_ffi.structural_walk(func.body, [(tirx.AttrStmt, attr), (tirx.For, loop), (ir.TensorLoad, load),
                                        (tirx.BufferStore, store)], order="pre")

    def call(node):
        if isinstance(node.op, ir.Op) and node.op.name in _PACKED_CALLS:
            callee = node.args[0].value if node.args and isinstance(node.args[0], ir.StringImm) else "?"
            problems.append(f"calls the packed function '{callee}' (only host code can)")

    tvm_ffi.structural_walk(func.body, [(ir.Call, call)])
    return list(dict.fromkeys(problems))


def writes_nothing(func: tirx.PrimFunc) -> bool:
    """Whether every effect of ``func`` (each store, each call evaluated for
    its effect: an extern, an atomic) lies inside a loop of no iterations:
    its outputs are empty whatever the other sizes."""
    empty, effects = [], []

    def loop(node):
        if isinstance(node.extent, tirx.IntImm) and node.extent.value == 0:
            empty.append(node)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(func.body, [(tirx.For, loop), (tirx.BufferStore, effects.append),
                                        (tirx.Evaluate, effects.append)], order="pre")
    return bool(empty) and not effects


def serial_loops(func: tirx.PrimFunc) -> int:
    """How many loops of more than one iteration (``while`` loops included)
    ``func`` runs outside any parallel thread binding."""
    loops = []

    def loop(node):
        if node.kind == tirx.ForKind.THREAD_BINDING and not (isinstance(node.extent, tirx.IntImm)
                                                             and node.extent.value == 1):
            return tvm_ffi.WalkResult.SKIP
        if not (isinstance(node.extent, tirx.IntImm) and node.extent.value <= 1):
            loops.append(node)
        return None

    tvm_ffi.structural_walk(func.body, [(tirx.For, loop), (tirx.While, loops.append)], order="pre")
    return len(loops)


def is_local(scope: str) -> bool:
    return scope.startswith("local")
