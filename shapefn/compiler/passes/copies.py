"""Copy insertion: a tensor read on a slot other than the one it lives on
(placement's answer) is copied there once per scope, and a constant is
loaded on the slot it is read on.

Constants are deduplicated program-wide: one constant of the executable per
Relax constant and slot, however many functions read it.
"""
from __future__ import annotations

import tvm

from ...runtime.builder import FunctionBuilder, ProgramBuilder, Reg
from ..codegen.register_cache import RegisterCache
from .placement import key


class ConstantTable:
    """The executable's constants, one per (Relax constant, slot)."""

    def __init__(self, program: ProgramBuilder):
        self._program = program
        self._indices: dict[tuple[int, str], int] = {}

    def index(self, const: tvm.ir.GenericConst, slot: str) -> int:
        k = (key(const), slot)
        if k not in self._indices:
            self._indices[k] = self._program.constant(const.value.numpy(), slot)
        return self._indices[k]


class Copies:
    """Emits, into one function, the loads of constants and the copies
    between slots, each once per scope of ``cache``."""

    def __init__(self, fb: FunctionBuilder, constants: ConstantTable, cache: RegisterCache):
        self._fb = fb
        self._constants = constants
        self._cache = cache

    def constant(self, const: tvm.ir.GenericConst, slot: str) -> Reg:
        """A register holding ``const`` on ``slot``."""
        return self._cache.get_or_emit(("const", key(const), slot),
                                       lambda: self._fb.load_const(self._constants.index(const, slot)))

    def to_slot(self, reg: Reg, have: str | None, want: str) -> Reg:
        """``reg`` (a tensor on ``have``, None if unknown) as a register on ``want``."""
        if have == want:
            return reg
        return self._cache.get_or_emit(("copy", reg.index, want), lambda: self._fb.copy(reg, want))
