"""Repairs of what TVM 0.27's ``FuseOps`` leaves for ``FuseTIR`` and
shapefn's code generation, on modules with sizes known only at run time.

``sizes_in_one_shape``: each fused function's sizes in one shape parameter,
in the order they occur in it.
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

``kernel_sizes_in_order``: after ``FuseTIR``, each fused kernel's size
parameters in the order they occur in it.

``injective_kernels``: TVM's ``AnnotateTIROpPattern`` calls a kernel
opaque, which nothing fuses with, when its index arithmetic is not affine:
a reshape of a tensor whose size is known only at run time reads
``x[i % n]``, a broadcast reads ``x[Select(n == 1, 0, i)]``. A kernel that
computes each output element at its own index from reads of its inputs is
injective whatever the indices it reads; it is marked so.

``deduplicated_kernels``: each distinct kernel once. Two fused kernels that
differ only in their size parameters' order are two kernels to ``FuseTIR``
and one after ``kernel_sizes_in_order``: which call sites share a kernel
changed from one process to the next.

``short_names``: fused functions, and with them their kernels, named by
their operations in full ("fused_shape_to_tensor23_less4_take7_...", 300
characters in Faster R-CNN), shortened.
"""
from __future__ import annotations

import functools
import hashlib
import heapq

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from .. import tvm_compat
from ..kernels import te_params

_SCALAR, _SHAPE, _OTHER = "scalar", "shape", "other"


def sizes_in_one_shape(mod: tvm.IRModule) -> tvm.IRModule:
    """Fused functions with sizes take them in one shape parameter, in the
    order they first occur in the function (``FuseOps`` orders the sizes of
    its shape parameter differently from one process to the next, and the
    kernel cache keys a kernel by its parameters' order)."""
    changes = {}
    for gv, func in mod.functions.items():
        if not _is_primitive(func):
            continue
        kinds = [_kind(param) for param in func.params]
        if _SCALAR not in kinds and _SHAPE not in kinds:
            continue
        sizes = _sizes(func.params, kinds, lambda shape: shape.ty.values)
        order = _first_occurrence(func, sizes)
        if kinds.count(_SCALAR) + kinds.count(_SHAPE) == 1 and kinds[-1] == _SHAPE and order == sorted(order):
            continue
        others = [param for param, kind in zip(func.params, kinds) if kind == _OTHER]
        merged = relax.Function([*others, relax.Var("sizes", relax.ShapeType([sizes[i] for i in order]))], func.body,
                                func.ret_ty, func.is_pure, func.attrs, func.span)
        changes[gv] = (merged, gv.name_hint, functools.partial(_merged_arguments, kinds, order))
    return _replaced(mod, changes)


def _first_occurrence(func: relax.Function, sizes: list) -> list[int]:
    """The positions of ``sizes`` in the order they first occur in the types
    of ``func``'s tensor parameters and then of its bindings (those that do
    not occur last, as they were)."""
    rank: dict = {}
    types = [param.ty for param in func.params if _kind(param) == _OTHER]
    types += [binding.var.ty for block in func.body.blocks for binding in block.bindings]
    for ty in types:
        for var in relax.analysis.tir_vars_in_type(ty):
            rank.setdefault(var, len(rank))
    return sorted(range(len(sizes)), key=lambda i: (rank.get(sizes[i], len(rank)), i))


_OPAQUE, _INJECTIVE = 8, 2


def injective_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """Opaque kernels that are injective (see the module's docstring) marked
    ``op_pattern`` injective. A kernel a call hands a tensor of a size known
    only at run time where the kernel has a literal one stays opaque:
    ``FuseTIR`` cannot match the two. So does one whose output sizes are
    not those of its inputs (sizes it takes as scalars: a reshape between
    shapes computed apart): fused, TVM 0.27 builds such kernels with a loop
    variable used before its loop ("variable ax0 has been used before
    definition", Faster R-CNN's anchors). shapefn's own kernels
    (``compiler/kernels``, named ``shapefn_*``) keep their schedules."""
    calls = _kernel_calls(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc) and func.attrs is not None and not gv.name_hint.startswith("shapefn_") \
                and int(func.attrs.get("op_pattern", -1)) == _OPAQUE and _is_injective(func) \
                and all(_sizes_match(func, call) for call in calls.get(gv.name_hint, ())):
            mod[gv] = func.with_attr("op_pattern", _INJECTIVE)
    return mod


def _kernel_calls(mod: tvm.IRModule) -> dict:
    """The ``call_tir`` calls of each kernel, by name."""
    calls: dict = {}

    def node(value):
        if isinstance(value, tvm.ir.expr.Call) and isinstance(value.op, tvm.ir.Op) \
                and value.op.name == "relax.call_tir":
            calls.setdefault(value.args[0].name_hint, []).append(value)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            tvm_ffi.structural_walk(func.body, node)
    return calls


def _sizes_match(func: tirx.PrimFunc, call: relax.Call) -> bool:
    args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
    for param, arg in zip(func.params, [*args, call.ty]):
        shape = getattr(getattr(arg, "ty", arg), "shape", None)
        if not isinstance(shape, relax.ShapeExpr) or len(shape.values) != len(param.shape):
            continue
        if any(isinstance(p, tirx.IntImm) and not isinstance(a, tirx.IntImm)
               for p, a in zip(param.shape, shape.values)):
            return False
    return True


def _is_injective(func: tirx.PrimFunc) -> bool:
    """One block under the root, all its iterators spatial, whose body
    stores into the last parameter's buffer at its iterators, in order,
    from loads of the other parameters' buffers only."""
    if not func.params:
        return False
    out, inputs = func.params[-1], func.params[:-1]
    if any(not hasattr(p, "shape") or p.shape is None for p in func.params):
        return False  # (sizes taken as scalars)
    blocks = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, lambda b: blocks.append(b))], order="pre")
    blocks = [b for b in blocks if b.name_hint != "root"]
    if len(blocks) != 1:
        return False
    (block,) = blocks
    store = block.body
    if block.init is not None or block.alloc_buffers or not isinstance(store, tirx.BufferStore) \
            or not store.buffer.same_as(out) or len(store.indices) != len(block.iter_vars) \
            or any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars) \
            or any(not index.same_as(iv.var) for index, iv in zip(store.indices, block.iter_vars)):
        return False
    foreign = []

    def node(value):
        if isinstance(value, tvm.ir.expr.TensorLoad) and not any(value.source.same_as(p) for p in inputs) \
                or isinstance(value, tvm.ir.expr.Call) and "call_" in str(getattr(value.op, "name", "call_")):
            foreign.append(value)

    tvm_ffi.structural_walk(store.value, node)
    return not foreign


# Longer kernel names are cut (a digest of the whole kept): PoCL aborts the
# process when it links a kernel whose name does not fit in a file name.
MAX_KERNEL_NAME = 80


def short_names(mod: tvm.IRModule) -> tvm.IRModule:
    """Fused functions (and so their kernels) named in ``MAX_KERNEL_NAME``
    characters at most."""
    changes = {}
    for gv, func in mod.functions.items():
        if _is_primitive(func) and len(gv.name_hint) > MAX_KERNEL_NAME:
            digest = hashlib.sha1(gv.name_hint.encode()).hexdigest()[:8]
            changes[gv] = (func, f"{gv.name_hint[:MAX_KERNEL_NAME - 9]}_{digest}", None)
    return _replaced(mod, changes)


def _replaced(mod: tvm.IRModule, changes: dict) -> tvm.IRModule:
    """``mod`` with each function ``gv`` of ``changes`` replaced by
    ``(function, name, arguments)``: its calls take ``arguments(args)``
    (the same if None)."""
    if not changes:
        return mod
    functions = dict(mod.functions.items())
    calls = {}
    for gv, (func, name, arguments) in changes.items():
        replacement = tvm.ir.GlobalVar(name)
        tvm_compat.update_type(replacement, relax.FuncType([p.ty for p in func.params], func.ret_ty, True))
        del functions[gv]
        functions[replacement] = func
        calls[gv] = (replacement, arguments)
    mod = tvm.IRModule(functions, attrs=mod.attrs)
    rewriter = _Calls(calls, mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _is_primitive(func):
            mod[gv] = rewriter.visit_expr(func)
    return mod


def _merged_arguments(kinds: list[str], order: list[int], args) -> list:
    others = [arg for arg, kind in zip(args, kinds) if kind == _OTHER]
    sizes = _sizes(args, kinds, _shape_values)
    return [*others, relax.ShapeExpr([sizes[i] for i in order])]


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
    """Calls of replaced functions: ``calls`` maps each to its replacement
    and how its arguments change."""

    def __init__(self, calls: dict, mod: tvm.IRModule):
        super().__init__(mod)
        self.calls = calls

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        found = self.calls.get(call.op) if isinstance(call.op, tvm.ir.GlobalVar) else None
        if found is None:
            return call
        replacement, arguments = found
        args = list(call.args) if arguments is None else arguments(call.args)
        return relax.Call(replacement, args, call.attrs, call.ty_args, call.span)


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


def kernel_sizes_in_order(mod: tvm.IRModule) -> tvm.IRModule:
    """After ``FuseTIR``: each fused kernel's size parameters in the order
    they first occur in it (``te_params.canonical``) and its calls' size
    arguments with them. ``FuseTIR`` orders them differently from one
    process to the next, which would change the kernels' cache keys."""
    reordered = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc) and gv.name_hint.startswith("fused_"):
            reordered[gv] = None
    if not reordered:
        return mod
    calls = _KernelCalls(mod, reordered)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = calls.visit_expr(func)
    for gv, found in reordered.items():
        if found is not None:
            mod[gv] = found[0]
    return mod


def deduplicated_kernels(mod: tvm.IRModule) -> tvm.IRModule:
    """Calls of a kernel structurally equal to another (but for its name)
    call the one first by name; the others are dropped. (Fusion makes a
    kernel per call site, and a model repeats its layers.)"""
    first: dict = {}
    same: dict = {}
    for gv, func in sorted(mod.functions.items(), key=lambda item: item[0].name_hint):
        if isinstance(func, tirx.PrimFunc):
            key = tvm_ffi.StructuralKey(func.without_attr("global_symbol"))
            if key in first:
                same[gv] = first[key]
            else:
                first[key] = gv
    if not same:
        return mod

    @relax.expr_functor.mutator
    class Rename(relax.PyExprMutator):
        def visit_global_var_(self, gv: relax.GlobalVar) -> relax.Expr:
            return same.get(gv, gv)

    rename = Rename(mod)
    out = tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv not in same},
                       attrs=mod.attrs, global_infos=mod.global_infos)
    for gv, func in out.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = rename.visit_expr(func)
    return out


@relax.expr_functor.mutator
class _KernelCalls(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, reordered: dict):
        super().__init__(mod)
        self.mod, self.reordered = mod, reordered

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir") \
                or call.args[0] not in self.reordered:
            return call
        gv, fields = call.args[0], list(call.args[1].fields)
        func, args = te_params.canonical(self.mod[gv], fields)
        if self.reordered[gv] is None:
            self.reordered[gv] = (func,)
        if args == fields:
            return call
        return relax.Call(call.op, [gv, relax.Tuple(args)], call.attrs, call.ty_args, call.span)
