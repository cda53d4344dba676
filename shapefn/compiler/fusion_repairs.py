"""Repairs of what TVM 0.27's ``FuseOps`` leaves for ``FuseTIR`` and
shapefn's code generation, on modules with sizes known only at run time.

``sizes_in_one_shape``: each fused function's sizes in one shape parameter.
``FuseOps`` passes a fused function the sizes its kernels take as scalar
arguments as scalar parameters, and the sizes its outputs' shapes need but
its tensors do not give as a shape parameter. ``FuseTIR`` (TVM 0.27) fails
on a function that has both ("Check failed: VarRemapGet(source) ==
nullptr" in ``RenewDefs``): SSD-lite's index arithmetic on sizes known only
at run time, fused with the kernels that use it, does. Here the scalar
parameters join the shape parameter, at the function and at its calls.

``sizes_before_use``: ``FuseOps`` emits each fused call where the group's
last binding was, after ordering the groups by the variables they use, but
not by the sizes: a group whose first kernels come before a ``match_cast``
that defines a size its later kernels use ends up called before the size
is defined. Each dataflow block's bindings are put back in an order where
every variable and size is defined before its use, the original order
wherever that allows.
"""
from __future__ import annotations

import heapq

import tvm
from tvm import relax

_SCALAR, _SHAPE, _OTHER = "scalar", "shape", "other"


def sizes_in_one_shape(mod: tvm.IRModule) -> tvm.IRModule:
    functions = dict(mod.functions.items())
    changed: dict[tvm.ir.GlobalVar, tuple[list[str], tvm.ir.GlobalVar]] = {}
    for gv, func in mod.functions.items():
        if not _is_primitive(func):
            continue
        kinds = [_kind(param) for param in func.params]
        if _SCALAR not in kinds or _SHAPE not in kinds:
            continue
        sizes = _sizes(func.params, kinds, lambda shape: shape.ty.values)
        others = [param for param, kind in zip(func.params, kinds) if kind == _OTHER]
        merged = relax.Function([*others, relax.Var("sizes", relax.ShapeType(sizes))], func.body, func.ret_ty,
                                func.is_pure, func.attrs, func.span)
        renamed = tvm.ir.GlobalVar(gv.name_hint)
        relax.expr._update_type(renamed, relax.FuncType([p.ty for p in merged.params], merged.ret_ty, True))
        del functions[gv]
        functions[renamed] = merged
        changed[gv] = (kinds, renamed)
    if not changed:
        return mod
    mod = tvm.IRModule(functions, attrs=mod.attrs)
    calls = _Calls(changed, mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _is_primitive(func):
            mod[gv] = calls.visit_expr(func)
    return mod


def _is_primitive(func) -> bool:
    return isinstance(func, relax.Function) and func.attrs is not None and bool(func.attrs.get("Primitive", False))


def _kind(param: relax.Var) -> str:
    if tvm.ir.is_prim_var(param):
        return _SCALAR
    return _SHAPE if isinstance(param.ty, relax.ShapeType) else _OTHER


def _sizes(values, kinds: list[str], shape_values) -> list:
    sizes = []
    for value, kind in zip(values, kinds):
        if kind == _SCALAR:
            sizes.append(value)
        elif kind == _SHAPE:
            sizes.extend(shape_values(value))
    return sizes


def _shape_values(shape: relax.Expr) -> list:
    return list(shape.values if isinstance(shape, relax.ShapeExpr) else shape.ty.values)


@relax.expr_functor.mutator
class _Calls(relax.PyExprMutator):
    """Calls of the changed functions with their sizes in one shape."""

    def __init__(self, changed, mod: tvm.IRModule):
        super().__init__(mod)
        self.changed = changed

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        found = self.changed.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if found is None:
            return call
        kinds, renamed = found
        others = [arg for arg, kind in zip(call.args, kinds) if kind == _OTHER]
        sizes = _sizes(call.args, kinds, _shape_values)
        return relax.Call(renamed, [*others, relax.ShapeExpr(sizes)], call.attrs, call.ty_args, call.span)


def size_definitions(mod: tvm.IRModule) -> dict:
    """Each size a ``match_cast`` defines, by the variable of the first
    ``match_cast`` that names it, in program order (before fusion moves
    bindings: ``FuseOps`` keeps ``match_cast`` bindings as they are); not
    those the function's parameters define."""
    definitions: dict = {}
    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not _is_primitive(func):
            given = {size for param in func.params for size in relax.analysis.definable_tir_vars_in_type(param.ty)}
            for block in func.body.blocks:
                for binding in block.bindings:
                    if isinstance(binding, relax.MatchCast):
                        for size in relax.analysis.tir_vars_in_type(binding.ty):
                            if size not in given:
                                definitions.setdefault(size, binding.var)
    return definitions


def sizes_before_use(mod: tvm.IRModule, definitions: dict) -> tvm.IRModule:
    """``definitions``: ``size_definitions`` of the module before fusion."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _is_primitive(func) \
                and any(isinstance(block, relax.DataflowBlock) for block in func.body.blocks):
            body = func.body
            blocks = [_defined_before_use(block, definitions) if isinstance(block, relax.DataflowBlock) else block
                      for block in body.blocks]
            mod[gv] = relax.Function(func.params, relax.SeqExpr(blocks, body.body, body.span), func.ret_ty,
                                     func.is_pure, func.attrs, func.span)
    return mod


def _defined_before_use(block: relax.DataflowBlock, definitions: dict) -> relax.DataflowBlock:
    """``block`` with its bindings in an order that defines each variable and
    size before its uses, the original one wherever possible (a stable
    topological order). ``definitions``: the variable of the ``match_cast``
    that defines each size."""
    bindings = list(block.bindings)
    definer: dict = {}
    for index, binding in enumerate(bindings):
        definer[binding.var] = index
    for size, var in definitions.items():
        if var in definer:
            definer[size] = definer[var]
    users: list[list[int]] = [[] for _ in bindings]
    waiting = [0] * len(bindings)
    for index, binding in enumerate(bindings):
        used = {*relax.analysis.used_vars(binding.value), *relax.analysis.tir_vars_in_type(binding.var.ty)}
        for var in used:
            source = definer.get(var)
            if source is not None and source != index:
                users[source].append(index)
                waiting[index] += 1
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(bindings):
        raise RuntimeError("fusion left a dataflow block whose sizes depend on each other in a cycle")
    if order == sorted(order):
        return block
    return relax.DataflowBlock([bindings[index] for index in order], block.span)
