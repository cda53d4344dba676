"""Symbolic sizes in int64 registers, for code generation.

A size variable is read from the first tensor or shape that defines it (a
parameter's dimension, a ``match_cast``'s) when it is first needed, and the
register is reused; size expressions become the VM's integer instructions;
shapes become ``load_shape`` (all literal) or ``shape_build`` (a template
whose negative entries name the registers of the computed dimensions).
"""
from __future__ import annotations

import tvm_ffi
from tvm import relax, tirx

from ...runtime.builder import FunctionBuilder, Reg
from ..passes.placement import key
from .register_cache import RegisterCache

_ARITH = {tirx.Add: "add", tirx.Sub: "sub", tirx.Mul: "mul", tirx.FloorDiv: "floordiv",
          tirx.FloorMod: "floormod", tirx.Min: "min", tirx.Max: "max", tirx.LT: "lt", tirx.EQ: "eq",
          # Booleans are 0 / 1 in registers.
          tirx.And: "min", tirx.Or: "max"}
# Comparisons the VM has no instruction for: (instruction, operands swapped, result negated).
_COMPARE = {tirx.GT: ("lt", True, False), tirx.GE: ("lt", False, True), tirx.LE: ("lt", True, True),
            tirx.NE: ("eq", False, True)}


class CodegenError(NotImplementedError):
    """Relax the shapefn code generator cannot express."""


class SizeRegisters:
    """Emits size expressions and shapes into one function. ``sources``
    maps each size variable (``key``) to where it is read from:
    ``(register, axis, the register holds a tensor)``."""

    def __init__(self, fb: FunctionBuilder, cache: RegisterCache, sources: dict[int, tuple[Reg, int, bool]]):
        self.fb = fb
        self.cache = cache
        self.sources = sources

    def bind_sizes(self, dims, source: Reg, is_tensor: bool) -> None:
        """Records ``source`` (a tensor, or a shape) as where the size
        variables among ``dims`` not yet known are read from."""
        for axis, d in enumerate(dims):
            if isinstance(d, tirx.Var) and self.cache.get(("prim", key(d))) is None \
                    and key(d) not in self.sources:
                self.sources[key(d)] = (source, axis, is_tensor)

    def is_defined(self, var: tirx.Var) -> bool:
        """Whether size variable ``var`` has a value (or a source) here."""
        return self.cache.get(("prim", key(var))) is not None or key(var) in self.sources

    def match(self, dims, value_ty, source: Reg) -> None:
        """A ``match_cast``'s run-time check: ``source`` (a tensor or a
        shape, of type ``value_ty``) has the rank of ``dims`` where its type
        does not say, and, where its type does not prove it, each literal
        size and each size of a variable bound before (the variables not
        yet bound are bound by the cast). Emits ``match_shape`` where
        something is left to check."""
        dims = list(dims)
        values = getattr(value_ty, "shape", None) if isinstance(value_ty, relax.TensorType) else value_ty
        values = getattr(values, "values", None)
        known = list(values) if values is not None and len(values) == len(dims) else None
        rank_known = getattr(value_ty, "ndim", -1) == len(dims)
        axes, pattern, regs = [], [], []
        for axis, d in enumerate(dims):
            if known is not None and tvm_ffi.structural_equal(known[axis], d):
                continue
            if isinstance(d, tirx.IntImm):
                axes.append(axis)
                pattern.append(int(d))
            elif all(self.is_defined(v) for v in tirx.analysis.undefined_vars(d)
                     ) and not (isinstance(d, tirx.Var) and not self.is_defined(d)):
                axes.append(axis)
                pattern.append(-1 - len(regs))
                regs.append(self.prim(d))
        if axes or not rank_known:
            self.fb.match_shape(source, len(dims), axes, pattern, regs)

    def prim(self, expr) -> Reg:
        """An int64 register holding the value of a PrimExpr."""
        if isinstance(expr, int):
            expr = tirx.IntImm("int64", expr)
        k = ("prim", key(expr) if isinstance(expr, tirx.Var) else tvm_ffi.StructuralKey(expr))
        reg = self.cache.get(k)
        if reg is not None:
            return reg
        fb = self.fb
        if isinstance(expr, tirx.IntImm):
            reg = fb.load_int(int(expr.value))
        elif isinstance(expr, tirx.Var):
            source = self.sources.get(key(expr))
            if source is None:
                raise CodegenError(f"size variable '{expr.name}' is used before it is defined")
            reg_, axis, is_tensor = source
            reg = fb.tensor_dim(reg_, axis) if is_tensor else fb.shape_get(reg_, axis)
        elif isinstance(expr, tirx.Cast):
            return self.prim(expr.value)
        elif type(expr) in _ARITH:
            reg = fb.emit(_ARITH[type(expr)], self.prim(expr.a), self.prim(expr.b))
        elif type(expr) in _COMPARE:
            op, swapped, negated = _COMPARE[type(expr)]
            a, b = (expr.b, expr.a) if swapped else (expr.a, expr.b)
            reg = fb.emit(op, self.prim(a), self.prim(b))
            if negated:
                reg = fb.emit("sub", self.prim(1), reg)
        elif isinstance(expr, tirx.Not):
            reg = fb.emit("sub", self.prim(1), self.prim(expr.a))
        else:
            raise CodegenError(f"shape expression {expr} ({type(expr).__name__}) is not supported")
        return self.cache.put(k, reg)

    def shape_of(self, tensor: Reg) -> Reg:
        """A shape register holding ``tensor``'s shape."""
        return self.cache.get_or_emit(("shape_of", tensor.index), lambda: self.fb.shape_of(tensor))

    def shape(self, values) -> Reg:
        """A shape register holding the shape of PrimExprs ``values``."""
        values = list(values)
        if all(isinstance(v, tirx.IntImm) and int(v) >= 0 for v in values):
            k = ("const_shape", tuple(int(v) for v in values))
            return self.cache.get_or_emit(k, lambda: self.fb.load_shape([int(v) for v in values]))
        k = ("shape", tuple(key(v) if isinstance(v, tirx.Var) else tvm_ffi.StructuralKey(v) for v in values))
        cached = self.cache.get(k)
        if cached is not None:
            return cached
        # Literal dimensions go in the instruction; only computed ones need
        # registers, and negative ones (a reshape's -1, read by its shape
        # function), which the template would take for register numbers.
        template, regs = [], []
        for v in values:
            if isinstance(v, tirx.IntImm) and int(v) >= 0:
                template.append(int(v))
            else:
                regs.append(self.prim(v))
                template.append(-len(regs))
        return self.cache.put(k, self.fb.shape_build(template, regs))
