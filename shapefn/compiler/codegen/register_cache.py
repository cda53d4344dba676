"""Values already in registers, so code generation emits each once.

Keys name what a register holds (a size expression, a shape, a constant on
a slot, a copy of a register to a slot). A value computed inside one arm
of an ``If`` is not in a register on the other path: each arm gets a nested
scope that sees what is cached outside it and forgets its own entries when
it ends.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ...runtime.builder import Reg


class _Scope:
    def __init__(self, parent: _Scope | None = None):
        self.parent = parent
        self.entries: dict = {}


class RegisterCache:
    """Scoped cache of registers by what they hold."""

    def __init__(self) -> None:
        self._scope = _Scope()

    def get(self, k) -> Reg | None:
        scope = self._scope
        while scope is not None:
            if k in scope.entries:
                return scope.entries[k]
            scope = scope.parent
        return None

    def put(self, k, reg: Reg) -> Reg:
        self._scope.entries[k] = reg
        return reg

    def get_or_emit(self, k, emit: Callable[[], Reg]) -> Reg:
        """The register cached under ``k``, else the one ``emit`` fills (cached)."""
        reg = self.get(k)
        return reg if reg is not None else self.put(k, emit())

    @contextlib.contextmanager
    def branch(self) -> Iterator[None]:
        """A nested scope for the duration (one arm of an ``If``)."""
        outer = self._scope
        self._scope = _Scope(outer)
        try:
            yield
        finally:
            self._scope = outer
