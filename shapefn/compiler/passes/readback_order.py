"""Orders a block's bindings so that reads of device values wait together.

A readback (``tensor_to_shape`` of a device tensor) stalls the host until the
device catches up. Left in program order, SSD-lite's per-class nonzero counts
would cost one sync per class. This list scheduler keeps every dependency but
runs all other ready work first and issues the readbacks that are ready at
the same time as one group: one sync per phase of the graph.

``order_module`` is the pass: every binding block of every Relax
function of a module (If branches included) as its emission groups, which
code generation emits in order, a group of readbacks as one instruction.

Dependencies: a binding follows the bindings that define the vars and size
variables it uses; a kernel writing its freshly allocated outputs, and a kill
freeing a value, follow every earlier reader of them. Readers of the same
value are not ordered among themselves.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..shape_calls import TO_HOST
from .placement import key


def is_readback(binding) -> bool:
    """A read of a tensor by the host: its values (``tensor_to_shape``) or
    the whole tensor (``shapefn.to_host``)."""
    value = binding.value
    if not (isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call)):
        return False
    op = value.op
    return (getattr(op, "name", None) == "relax.tensor_to_shape"
            or isinstance(op, relax.ExternFunc) and op.global_symbol == TO_HOST)


# Ops that free a value.
KILLS = {"relax.memory.kill_tensor", "relax.memory.kill_storage", "relax.vm.kill_object"}


def _writes(binding, allocated: set[int]) -> set[int]:
    """Vars a binding writes: the freshly allocated outputs a kernel call is
    handed (it writes them in place), or the value a kill frees."""
    value = binding.value
    if not isinstance(value, relax.Call):
        return set()
    if getattr(value.op, "name", None) in KILLS:
        return {key(value.args[0])}
    if isinstance(value.op, (relax.GlobalVar, relax.ExternFunc)):
        out = {key(a) for a in value.args if isinstance(a, relax.Var) and key(a) in allocated}
        allocated.difference_update(out)  # written once; later uses read it
        return out
    return set()


def order_bindings(bindings) -> list[list]:
    """The bindings as emission groups, in an order that respects every
    dependency: a group is one binding, or several readbacks to batch."""
    n = len(bindings)
    if n < 2:
        return [[b] for b in bindings]
    last_write: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    size_defs: dict[int, int] = {}
    allocated: set[int] = set()
    succs: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i, b in enumerate(bindings):
        writes = _writes(b, allocated)
        preds = set()
        for var in relax.analysis.free_vars(b.value):
            k = key(var)
            if k in writes:
                continue
            if k in last_write:
                preds.add(last_write[k])
            readers.setdefault(k, []).append(i)
        for k in writes:
            # A kernel's output (or a freed value) waits for earlier readers and writers.
            if k in last_write:
                preds.add(last_write[k])
            preds.update(readers.pop(k, ()))
            last_write[k] = i
        for sym in relax.analysis.free_symbolic_vars(b.value):
            if key(sym) in size_defs:
                preds.add(size_defs[key(sym)])
        last_write[key(b.var)] = i
        if isinstance(b.value, relax.Call) and getattr(b.value.op, "name", None) == "relax.builtin.alloc_tensor":
            allocated.add(key(b.var))
        if isinstance(b, relax.MatchCast):
            for sym in relax.analysis.definable_tir_vars_in_type(b.ty):
                size_defs.setdefault(key(sym), i)
        preds.discard(i)
        for p in preds:
            succs[p].append(i)
        indegree[i] = len(preds)
    ready = [i for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    readbacks: list[int] = []
    groups: list[list] = []

    def release(i: int) -> None:
        for s in succs[i]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, s)

    while ready or readbacks:
        if ready:
            i = heapq.heappop(ready)
            if is_readback(bindings[i]):
                readbacks.append(i)
                continue
            groups.append([bindings[i]])
            release(i)
            continue
        readbacks.sort()
        groups.append([bindings[i] for i in readbacks])
        done, readbacks = readbacks, []
        for i in done:
            release(i)
    if sum(len(g) for g in groups) != n:
        raise RuntimeError("shapefn scheduler lost bindings (a dependency cycle?)")
    return groups


@dataclass
class ReadbackOrder:
    """The emission groups of each binding block of a module (by the block's
    identity, ``placement.key``)."""

    groups: dict[int, list[list]] = field(default_factory=dict)

    def __getitem__(self, block: relax.BindingBlock) -> list[list]:
        return self.groups[key(block)]


def order_module(mod: tvm.IRModule) -> ReadbackOrder:
    """The readback-scheduling pass over every Relax function of ``mod``."""
    out = ReadbackOrder()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            _schedule_seq(func.body, out)
    return out


def _schedule_seq(seq: relax.SeqExpr, out: ReadbackOrder) -> None:
    for block in seq.blocks:
        out.groups[key(block)] = order_bindings(list(block.bindings))
        for binding in block.bindings:
            if isinstance(binding.value, relax.If):
                _schedule_seq(binding.value.true_branch, out)
                _schedule_seq(binding.value.false_branch, out)
