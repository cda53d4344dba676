"""Building blocks for shapefn's GPU TIR kernels (``gpu``,
``gpu_count``): kernel launches, a work-group barrier that also
orders global memory, prefix sums within a work group, and the steps of a
bitonic sorting network.

Kernels here are written with explicit thread bindings for TVM's CUDA and
OpenCL code generators: every launch is ``blockIdx.x`` work groups of
``threadIdx.x`` work items. Work-group memory (``shared``) is synchronised
with ``tvm_storage_sync("shared")``; scratch in global memory that the
threads of one group exchange is synchronised with ``group_barrier``.
Everything a barrier sits in is uniform across the group (loop bounds and
conditions computed alike by every thread), so no barrier is divergent.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tvm import ir, tirx
from tvm.script.ir_builder import tirx as T

from .. import tvm_compat
from .heap import Before, Swap
from .tir_builder import i64, local

# Work items per group: every OpenCL device we target allows 256, and the
# shared arrays below (a few KB) fit any device's local memory.
THREADS = 256
_THREADS_LOG = 8
assert 1 << _THREADS_LOG == THREADS


# --------------------------------------------------------------------------- barrier
# TVM's OpenCL code generator prints every work-group barrier as
# barrier(CLK_LOCAL_MEM_FENCE), which orders local memory only: global
# scratch written by one work item and read by another after it may be
# stale on devices with per-unit caches (the OpenCL memory model requires
# CLK_GLOBAL_MEM_FENCE for that). This op lowers to a barrier with both
# fences on OpenCL and to TVM's shared-memory barrier elsewhere
# (__syncthreads on CUDA orders global memory within a block too).
_GROUP_BARRIER = "shapefn.group_barrier"
# CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE: their values in every OpenCL C
# header (Khronos opencl-c-base.h, PoCL, NVIDIA, AMD, Intel).
_OPENCL_LOCAL_AND_GLOBAL_FENCE = 3


def _register_group_barrier() -> None:
    if _GROUP_BARRIER in ir.Op.list_op_names():
        return
    tvm_compat.register_op(_GROUP_BARRIER, "work-group barrier ordering local and global memory")
    ir.register_op_attr(_GROUP_BARRIER, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
    ir.register_op_attr(_GROUP_BARRIER, "TScriptPrinterName", "shapefn_group_barrier")
    tirx.op.register_intrin_lowering(
        _GROUP_BARRIER, "opencl",
        f=lambda _call: tirx.call_extern("void", "barrier", _OPENCL_LOCAL_AND_GLOBAL_FENCE))
    tirx.op.register_intrin_lowering(
        _GROUP_BARRIER, "default",
        f=lambda _call: tirx.call_intrin("void", "tirx.tvm_storage_sync", "shared"))


_register_group_barrier()


def group_barrier() -> None:
    """Waits for every work item of the group; global and shared memory
    written before it is visible to all of them after it."""
    T.evaluate(tirx.call_intrin("void", _GROUP_BARRIER))


def shared_barrier() -> None:
    """Waits for every work item of the group; orders shared memory."""
    T.evaluate(T.tvm_storage_sync("shared"))


# --------------------------------------------------------------------------- launches
def ceildiv(a, b):
    return tirx.floordiv(a + (b - 1), b)


@contextlib.contextmanager
def launch(groups, threads: int = THREADS) -> Iterator[tuple]:
    """One kernel launch of ``groups`` work groups of ``threads`` work items
    (``THREADS`` unless a kernel needs more), skipped when ``groups`` is 0
    (an empty launch is an error on CUDA and OpenCL); yields the group and
    work-item indices as int64."""
    with T.If(groups > 0):
        with T.Then():
            block = T.env_thread("blockIdx.x")
            thread = T.env_thread("threadIdx.x")
            with T.launch_thread(block, tirx.Cast("int32", groups)):
                with T.launch_thread(thread, threads):
                    yield tirx.Cast("int64", block), tirx.Cast("int64", thread)


@contextlib.contextmanager
def launch_per_element(count) -> Iterator:
    """A launch of one work item per element of ``range(count)``; yields the
    element index (int64) inside a guard ``index < count``."""
    with launch(ceildiv(count, i64(THREADS))) as (group, thread):
        index = T.bind(group * THREADS + thread)
        with T.If(index < count):
            with T.Then():
                yield index


@contextlib.contextmanager
def strided(count, thread) -> Iterator:
    """Positions ``0 .. count - 1`` shared out among a group's work items,
    ``thread`` taking every ``THREADS``-th from its own; yields the position.
    No barrier may sit inside (work items run different trip counts)."""
    with T.serial(0, ceildiv(count, i64(THREADS))) as r:
        position = T.bind(r * THREADS + thread)
        with T.If(position < count):
            with T.Then():
                yield position


def unravel(flat, dims) -> list:
    """Row-major coordinates of ``flat`` in an array of shape ``dims`` (bound)."""
    coords = []
    for d in reversed(dims[1:]):
        coords.append(T.bind(tirx.floormod(flat, d)))
        flat = tirx.floordiv(flat, d)
    if dims:
        coords.append(T.bind(flat))
    return coords[::-1]


def ceil_log2(value):
    """A thread-local int64 holding the smallest ``b`` with ``2**b >= value``.
    Device code only: TVM makes a host-side local of a GPU kernel device
    memory, which the host code then dereferences."""
    bits = local("int64", 0)
    with T.While((i64(1) << bits[0]) < value):
        bits[0] = bits[0] + 1
    return bits


# --------------------------------------------------------------------------- scans
def group_exclusive_scan(value, thread):
    """Prefix sums of one int64 ``value`` per work item, in work-item order:
    ``(sum of the values of the items before this one, sum of all)``, both
    bound. Every work item of the group must reach it (it has barriers)."""
    sums = T.buffer_proxy(T.alloc_buffer((THREADS,), "int64", scope="shared"))
    sums[thread] = value
    shared_barrier()
    for step in range(_THREADS_LOG):  # Hillis-Steele: log2(THREADS) rounds
        offset = 1 << step
        before = T.bind(tirx.if_then_else(thread >= offset, sums[thread - offset], i64(0)))
        shared_barrier()
        sums[thread] = sums[thread] + before
        shared_barrier()
    inclusive = T.bind(sums[thread])
    total = T.bind(sums[THREADS - 1])
    shared_barrier()  # before the next scan's first store
    return T.bind(inclusive - value), total


def group_scan_array(source, dest, size, thread):
    """``dest[i] = source[0] + ... + source[i - 1]`` for ``i < size`` (int64,
    ``dest`` may be ``source``) by one work group; returns the total.
    Each work item sums a contiguous run, the runs' sums are scanned in
    shared memory, and each item writes its run's prefixes."""
    run = ceildiv(size, i64(THREADS))
    start = T.bind(tirx.min(thread * run, size))
    length = T.bind(tirx.min(start + run, size) - start)
    partial = local("int64", 0)
    with T.serial(0, length) as i:
        partial[0] = partial[0] + source[start + i]
    before, total = group_exclusive_scan(partial[0], thread)
    running = local("int64", before)
    with T.serial(0, length) as i:
        value = T.bind(source[start + i])
        dest[start + i] = running[0]
        running[0] = running[0] + value
    return total


# --------------------------------------------------------------------------- sorting
# Positions compared and swapped by the caller's ``before(p, q)`` (whether
# the element at p belongs before the one at q) and ``swap(p, q)``, int64
# (the types of heap.py).


def pair_swap(keys, ids, base=None) -> Swap:
    """The ``swap`` of positions of two buffers sorted together, a key and
    its index, position ``p`` at ``base + p`` of each."""

    def at(p):
        return p if base is None else base + p

    def swap(p, q):
        key, index = T.bind(keys[at(p)]), T.bind(ids[at(p)])
        keys[at(p)] = keys[at(q)]
        ids[at(p)] = ids[at(q)]
        keys[at(q)] = key
        ids[at(q)] = index

    return swap


def bitonic_pair(comparator, span_log, stride_log):
    """Positions ``(i, j)``, ``i < j``, of comparator ``comparator`` in the
    step of a bitonic sorting network that merges spans of ``2**span_log``
    at distance ``2**stride_log``. Every comparator puts the element that
    belongs first at ``i`` (no descending halves): the first step of a span
    pairs mirror positions, the later ones positions ``stride`` apart. So
    positions past the end can be treated as elements that belong last, and
    comparators reaching them skipped: any length sorts without padding."""
    one = tirx.const(1, str(comparator.ty.dtype))  # (int64 or int32 positions, as given)
    stride = one << stride_log
    i = T.bind(((comparator >> stride_log) << (stride_log + 1)) + (comparator & (stride - 1)))
    span = one << span_log
    mirror = i + span - 1 - 2 * (i & (span - 1))
    j = T.bind(tirx.Select(stride_log + 1 == span_log, mirror, i + stride))
    return i, j


def compare_exchange(before: Before, swap: Swap, i, j, size) -> None:
    """Orders positions ``i < j`` when ``j`` is inside ``size``."""
    with T.If(j < size):  # nested, not and-ed: before() must not read past the end
        with T.Then():
            with T.If(before(j, i)):
                with T.Then():
                    swap(i, j)


def group_sort(before: Before, swap: Swap, size, thread, span_log_limit=None, barrier=None) -> None:
    """Sorts positions ``0 .. size - 1`` by one work group with a bitonic
    network in ``log2(size)**2 / 2`` steps of ``size / 2`` comparators, each
    step ended by ``barrier`` (``group_barrier``; ``shared_barrier`` for
    positions in shared memory). With ``span_log_limit``, only spans up
    to ``2**span_log_limit`` are merged: each aligned block of that length is
    sorted on its own. ``size`` must be uniform over the group."""
    barrier = barrier or group_barrier
    size_log = ceil_log2(size)
    spans = size_log[0] if span_log_limit is None else tirx.min(size_log[0], span_log_limit)
    comparators = (i64(1) << size_log[0]) >> 1
    with T.serial(0, spans) as s:
        with T.serial(0, s + 1) as t:
            with strided(comparators, thread) as q:
                i, j = bitonic_pair(q, s + 1, s - t)
                compare_exchange(before, swap, i, j, size)
            barrier()
