"""Rewrites before legalization that leave fewer kernels: reductions of a
tensor of sizes, computed on the sizes.

Detection models take the smaller of a count and a limit as
``ReduceMin(Concat(count, limit))``, which TVM imports as ``min`` of a
``shape_to_tensor``: a reduction kernel, which nothing fuses with, after a
kernel that makes the tensor. Here ``min``, ``max``, ``sum`` and ``prod`` of
all elements of ``shape_to_tensor(sizes)`` become ``shape_to_tensor`` of one
size expression (reshaped to the reduction's shape): one injective kernel
that fuses with what uses it.
"""
from __future__ import annotations

import functools

import tvm
from tvm import relax, tirx

_REDUCTIONS = {"relax.min": tirx.min, "relax.max": tirx.max, "relax.sum": lambda a, b: a + b,
               "relax.prod": lambda a, b: a * b}


def fewer_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = _Folding(mod).visit_expr(func)
    return mod


@relax.expr_functor.mutator
class _Folding(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        combine = _REDUCTIONS.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        if combine is None or call.attrs.axis is not None and [int(a) for a in call.attrs.axis] not in ([0], [-1]):
            return call
        sizes = self._sizes_of(call.args[0])
        if not sizes:
            return call
        folded = relax.op.shape_to_tensor(relax.ShapeExpr([functools.reduce(combine, sizes)]))
        return relax.op.reshape(folded, [1] if call.attrs.keepdims else [])

    def _sizes_of(self, expr: relax.Expr):
        """The sizes ``expr`` holds, if it is a ``shape_to_tensor`` of known ones."""
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
        if not (isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op)
                and bound.op.name == "relax.shape_to_tensor"):
            return None
        shape = bound.args[0]
        values = shape.values if isinstance(shape, relax.ShapeExpr) else shape.ty.values
        return list(values) if values is not None and len(values) > 0 else None
