"""Binary heaps in TIR, for kernels that select or order elements (top-k,
NMS): O(log n) per step, no recursion, only scalar locals.

A heap here lives in positions ``0 .. size - 1`` of storage the caller owns,
reached through ``before(a, b)``, whether position ``a`` comes before
position ``b`` in the final order, and ``swap(a, b)``. Its root is the
element that comes *last*: the one to drop when a better one arrives (top-k)
and the one to move to the end when sorting.
"""
from __future__ import annotations

from collections.abc import Callable

from tvm import tirx
from tvm.script.ir_builder import tirx as T

from .tir_builder import local

# Both take two int64 positions (TIR expressions).
Before = Callable[[object, object], object]
Swap = Callable[[object, object], None]


def sift_down(before: Before, swap: Swap, start, size) -> None:
    """Moves the element at ``start`` down until both its children come before it."""
    pos = local("int64", start)
    more = local("bool", tirx.const(True))
    with T.While(more[0]):
        left = T.bind(pos[0] * 2 + 1)
        with T.If(left >= size):
            with T.Then():
                more[0] = tirx.const(False)
            with T.Else():
                # The child that comes later; the parent must come after it.
                worse = local("int64", left)
                with T.If(left + 1 < size):  # (TIR's And evaluates both sides: nested, not and-ed)
                    with T.Then():
                        with T.If(before(left, left + 1)):
                            with T.Then():
                                worse[0] = left + 1
                with T.If(before(pos[0], worse[0])):
                    with T.Then():
                        swap(pos[0], worse[0])
                        pos[0] = worse[0]
                    with T.Else():
                        more[0] = tirx.const(False)


def sift_up(before: Before, swap: Swap, start) -> None:
    """Moves the element at ``start`` up until its parent comes after it."""
    pos = local("int64", start)
    with T.While(pos[0] > 0):
        parent = T.bind(tirx.floordiv(pos[0] - 1, 2))
        with T.If(before(parent, pos[0])):
            with T.Then():
                swap(parent, pos[0])
                pos[0] = parent
            with T.Else():
                pos[0] = tirx.const(0, "int64")


def sort_heap(before: Before, swap: Swap, size) -> None:
    """Turns a heap of ``size`` elements into their final order (first first)."""
    with T.serial(0, size) as t:
        end = T.bind(size - 1 - t)
        swap(tirx.const(0, "int64"), end)
        sift_down(before, swap, tirx.const(0, "int64"), end)


def heap_sort(before: Before, swap: Swap, size) -> None:
    """Sorts positions ``0 .. size - 1`` into their final order, in place."""
    with T.serial(0, tirx.floordiv(size, 2)) as t:
        sift_down(before, swap, tirx.floordiv(size, 2) - 1 - t, size)
    sort_heap(before, swap, size)
