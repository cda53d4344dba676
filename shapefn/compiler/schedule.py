"""Orders a block's bindings so that reads of device values wait together.

A readback (``tensor_to_shape`` of a device tensor) stalls the host until the
device catches up. Left in program order, SSD-lite's per-class nonzero counts
would cost one sync per class. This list scheduler keeps every dependency but
runs all other ready work first and issues the readbacks that are ready at
the same time as one group: one sync per phase of the graph.

Dependencies: a binding follows the bindings that define the vars and size
variables it uses, and every earlier binding touching the same var (kernels
write into their arguments, so readers and writers keep their order).
"""
from __future__ import annotations

import heapq

from tvm import relax

from .placement import key


def is_readback(binding) -> bool:
    value = binding.value
    return (isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call)
            and getattr(value.op, "name", None) == "relax.tensor_to_shape")


def schedule(bindings) -> list[list]:
    """The bindings as emission groups, in an order that respects every
    dependency: a group is one binding, or several readbacks to batch."""
    n = len(bindings)
    if n < 2:
        return [[b] for b in bindings]
    last_touch: dict[int, int] = {}
    size_defs: dict[int, int] = {}
    succs: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i, b in enumerate(bindings):
        preds = set()
        for var in relax.analysis.free_vars(b.value):
            k = key(var)
            if k in last_touch:
                preds.add(last_touch[k])
            last_touch[k] = i
        for sym in relax.analysis.free_symbolic_vars(b.value):
            if key(sym) in size_defs:
                preds.add(size_defs[key(sym)])
        last_touch[key(b.var)] = i
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
