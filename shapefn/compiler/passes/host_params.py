"""Host parameters: tensors a loop reads only to compute shapes, read back
once before it.

A loop (ONNX ``Loop``, a recursive Relax function) often captures small
tensors computed before it and reads one element per iteration to size its
work: Mask R-CNN's paste-masks loop takes each detection's box from the
detections' [N, 4] boxes. With the boxes on the device, every iteration
reads its box back and waits on the device. A tensor parameter that
shapes depend on and whose every use in its function can run on the host
(kernels placement puts on the host when the parameter is there,
readbacks, shape functions, device kernels taking small tensors computed
from it, and passing it on unchanged to the next iteration) becomes a
*host parameter*: the caller reads the tensor back whole, once, in the
readback group of its phase (``TO_HOST``), and every iteration takes its
values from that copy. The design: docs/readbacks.md.

Only small tensors qualify: every dimension but one a literal, the literal
ones holding at most ``placement.SMALL_ELEMENTS`` elements (a list of
boxes, scores, labels or sizes), so that reading one back costs what its
elements' readbacks would. Feature maps never do.

Runs on Relax after TVM's ``CallTIRRewrite``, before code generation.
"""
from __future__ import annotations

import tvm
from tvm import relax, tirx

from ...runtime.registry import data_dependence
from ..shape_calls import SHAPE_FUNC, TO_HOST, VIEW
from .placement import (
    ALLOC_TENSOR,
    HOST,
    ON_DEVICE,
    SMALL_ELEMENTS,
    PlacementPolicy,
    all_bindings,
    is_small_tensor,
    is_tensor_const,
    key,
    place,
)

# Uses of a tensor that read it where it is (the host, for a host parameter).
_READS = {"relax.shape_of", "relax.memory.kill_tensor", "relax.vm.kill_object", "vm.builtin.shape_of"}
# Uses that compute shapes from its values (a shape function only where
# its mask says the input's values matter).
_SHAPE_READS = {"relax.tensor_to_shape"}


def plan(mod: tvm.IRModule, policy: PlacementPolicy = ON_DEVICE) -> dict[str, frozenset[int]]:
    """The indices of each Relax function's host parameters (functions
    without any are left out; none at all when ``policy`` puts everything
    on the host). ``main``'s parameters are the caller's inputs and stay
    where the VM's caller puts them."""
    if policy.all_on_host:
        return {}
    out = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function) or gv.name_hint == "main":
            continue
        chosen = _host_params(gv, func, mod)
        if chosen:
            out[gv.name_hint] = chosen
    return out


def _host_params(gv: relax.GlobalVar, func: relax.Function, mod: tvm.IRModule) -> frozenset[int]:
    candidates = {i for i, p in enumerate(func.params) if _is_small_list(p.ty)}
    # Every candidate is assumed on the host; those with a use that needs
    # the device drop out, which may move other uses back to the device:
    # repeat until no candidate drops.
    while candidates:
        placement = place(func, mod, ON_DEVICE, host_params=frozenset(candidates))
        kept = {i for i in candidates if _all_uses_on_host(func, i, gv, placement, mod)}
        if kept == candidates:
            break
        candidates = kept
    return frozenset(candidates)


def _is_small_list(ty) -> bool:
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return False
    dims = ty.shape.values
    literal = [int(d) for d in dims if isinstance(d, tirx.IntImm)]
    if len(dims) - len(literal) > 1:
        return False
    numel = 1
    for d in literal:
        numel *= d
    return numel <= SMALL_ELEMENTS


def _all_uses_on_host(func: relax.Function, index: int, gv: relax.GlobalVar, placement, mod) -> bool:
    """Whether parameter ``index`` computes shapes, and only needs the host,
    under ``placement``: it and every tensor computed from it (``names``)
    are read by host kernels, by readbacks and shape functions (at least
    one: it computes shapes), by device kernels only as small tensors
    (sizes, bounds, scale factors: a copy to the device, which does not
    wait), and passed on unchanged to the next iteration; none reaches the
    result."""
    names = {key(func.params[index])}
    computes_shapes = False
    allocated: set[int] = set()
    results = [func.body.body]  # the function's result and its If branches' (below)
    for binding in all_bindings(func.body):
        value = binding.value
        if isinstance(value, relax.Call) and getattr(value.op, "name", None) == ALLOC_TENSOR:
            allocated.add(key(binding.var))
            continue
        if isinstance(value, relax.If):
            results += [value.true_branch.body, value.false_branch.body]
        # An If's branches are bindings of their own (``all_bindings``): only its condition is read here.
        read = relax.analysis.free_vars(value.cond if isinstance(value, relax.If) else value)
        used = [v for v in read if key(v) in names]
        if not used:
            continue
        if isinstance(value, relax.Var) or isinstance(binding, relax.MatchCast):
            names.add(key(binding.var))  # an alias
            continue
        if not isinstance(value, relax.Call):
            return False
        op = value.op
        name = op.name if isinstance(op, tvm.ir.Op) else op.global_symbol if isinstance(op, relax.ExternFunc) else None
        if name in _SHAPE_READS:
            computes_shapes = True
            continue
        if name == SHAPE_FUNC:
            mask = data_dependence(value.args[0].value)
            inputs = value.args[2:]
            computes_shapes |= any(mask[k] for k, a in enumerate(inputs)
                                   if k < len(mask) and isinstance(a, relax.Var) and key(a) in names)
            continue
        if name in _READS:
            continue
        if name == VIEW:
            names.add(key(binding.var))
            continue
        if isinstance(op, relax.GlobalVar) and isinstance(mod[op], tirx.PrimFunc):
            if placement.kernel_slot.get(key(binding)) != HOST:
                if all(is_small_tensor(v.ty) for v in used):
                    continue
                return False
            # Its outputs (the freshly allocated arguments it writes) are computed from the parameter.
            outputs = {key(a) for a in value.args if isinstance(a, relax.Var) and key(a) in allocated}
            allocated.difference_update(outputs)
            names.update(outputs)
            continue
        if isinstance(op, relax.GlobalVar) and op.name_hint == gv.name_hint:
            # The next iteration: only this parameter, passed on unchanged.
            for k, arg in enumerate(value.args):
                if isinstance(arg, relax.Var) and key(arg) in names and k != index:
                    return False
            arg = value.args[index]
            if not (isinstance(arg, relax.Var) and key(arg) in names):
                return False
            continue
        return False
    return computes_shapes and not any(key(v) in names for r in results for v in relax.analysis.free_vars(r))


def read_back_host_params(mod: tvm.IRModule, host_params: dict[str, frozenset[int]]) -> tvm.IRModule:
    """Every call of a function with host parameters, other than its own
    next iteration, hands them a host copy (``TO_HOST``) of its argument."""
    if not host_params:
        return mod
    functions = dict(mod.functions)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            body = _rewrite_seq(func.body, gv.name_hint, host_params)
            if body is not func.body:
                functions[gv] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs)
    return tvm.IRModule(functions, mod.attrs, mod.global_infos)


def _rewrite_seq(seq: relax.SeqExpr, caller: str, host_params) -> relax.SeqExpr:
    changed = False
    blocks = []
    for block in seq.blocks:
        bindings = []
        for binding in block.bindings:
            new = _rewrite_binding(binding, caller, host_params, bindings)
            changed |= new is not binding
            bindings.append(new)
        blocks.append(relax.BindingBlock(bindings))
    return relax.SeqExpr(blocks, seq.body) if changed else seq


def _rewrite_binding(binding, caller: str, host_params, emitted: list):
    value = binding.value
    if isinstance(value, relax.If) and isinstance(binding, relax.VarBinding):
        true_branch = _rewrite_seq(value.true_branch, caller, host_params)
        false_branch = _rewrite_seq(value.false_branch, caller, host_params)
        if true_branch is value.true_branch and false_branch is value.false_branch:
            return binding
        return relax.VarBinding(binding.var, relax.If(value.cond, true_branch, false_branch))
    if not (isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call)
            and isinstance(value.op, relax.GlobalVar)):
        return binding
    callee = value.op.name_hint
    indices = host_params.get(callee, ())
    if not indices or callee == caller:
        return binding
    args = list(value.args)
    for i in sorted(indices):
        arg = args[i]
        if isinstance(arg, relax.Var):
            host = relax.Var(f"{arg.name}_host", arg.ty)
            emitted.append(relax.VarBinding(host, relax.Call(relax.ExternFunc(TO_HOST), [arg], ty_args=[arg.ty],
                                                             ret_ty=arg.ty)))
            args[i] = host
        elif not is_tensor_const(arg):
            raise TypeError(f"host parameter {i} of '{callee}' gets a {type(arg).__name__}")
    return relax.VarBinding(binding.var, relax.Call(value.op, args, value.attrs, value.ty_args))
