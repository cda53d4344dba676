"""ONNX ``Loop`` as a recursive Relax function.

Relax has no loop construct. A ``Loop`` node becomes a module-level function

    loop(i, [max_trip], [cond], *carried, *scans, *captured):
        if i < max_trip and cond:
            <body>
            return loop(i + 1, max_trip, cond', *carried', *(scans ++ [scan']), *captured)
        return (*carried, *scans)

called once where the node is. The trip count and the condition are scalars
(``R.Prim``), so the test at the top of each iteration runs on the host in
VM registers; the condition the body computes is read back once per
iteration (one byte), as the decision needs it. Scan outputs grow by one
slice along a new axis 0 per iteration (their per-iteration shape may
change), so a scan of n iterations copies O(n^2) elements. Values of the
enclosing graph that the body reads (ONNX subgraphs capture outer names)
become parameters; constants are used in place. shapefn's code generator
turns the self call in tail position into a jump, so the trip count is not
limited by the call depth.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from ...compiler import tvm_compat
from .checks import node_label
from .values import const_value


def _graph_free_names(graph) -> set[str]:
    """Names a graph (and its nested subgraphs) reads but does not define."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(name for name in node.input if name)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                used |= _graph_free_names(sub)
        defined.update(node.output)
    return used - defined


def _param_like(value, name: str, keep_literals: bool = True) -> relax.Var:
    """A parameter that can receive ``value``: a tensor of the same dtype and
    rank, a shape of the same length, or a scalar of the same dtype. Its
    sizes are fresh variables (the caller's are not visible in the loop
    function), except literal ones if ``keep_literals`` (values that do not
    change from one iteration to the next)."""
    ty = value.ty
    if isinstance(ty, relax.TensorType):
        if ty.ndim < 0:
            raise ValueError(f"Loop: the rank of '{name}' is unknown")
        dims = ty.shape.values if ty.shape is not None else [None] * ty.ndim
        dims = [d if keep_literals and isinstance(d, tirx.IntImm) else tirx.Var(f"{name}_{axis}", "int64")
                for axis, d in enumerate(dims)]
        return relax.Var(name, relax.TensorType(dims, ty.dtype))
    if isinstance(ty, relax.ShapeType) and ty.ndim >= 0:
        return relax.Var(name, relax.ShapeType([tirx.Var(f"{name}_{k}", "int64") for k in range(ty.ndim)]))
    if isinstance(ty, tvm.ir.PrimType):
        return tirx.Var(name, str(ty.dtype))
    raise ValueError(f"Loop: '{name}' of type {ty} cannot cross into the loop body")


def _carried_param(value, name: str, declared_out) -> relax.Var:
    """The loop function's parameter for carried value ``value``: fresh size
    variables, except where the body's output ``declared_out`` (the next
    iteration's value) declares the literal size the value has on entry, a
    size that stays (a shape vector's length, for one: a converter that
    reads a shape from a carried value needs its length)."""
    param = _param_like(value, name, keep_literals=False)
    ty = value.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return param
    declared = declared_out.type.tensor_type if declared_out.type.HasField("tensor_type") else None
    if declared is None or not declared.HasField("shape") or len(declared.shape.dim) != ty.ndim:
        return param
    dims = [d if isinstance(d, tirx.IntImm) and dim.HasField("dim_value") and dim.dim_value == int(d) else fresh
            for d, dim, fresh in zip(ty.shape.values, declared.shape.dim, param.ty.shape.values)]
    return relax.Var(name, relax.TensorType(dims, ty.dtype))


def _as_declared(bb, value, param, what: str):
    """``value`` (the next iteration's carried value) with the literal sizes
    of ``param`` (``_carried_param``): cast where its sizes are not known
    at import (checked when it runs), an error where they differ."""
    want = param.ty.shape.values
    have = value.ty.shape.values
    fixed = [w for w in want if isinstance(w, tirx.IntImm)]
    if not fixed:
        return value
    for axis, (w, h) in enumerate(zip(want, have)):
        if isinstance(w, tirx.IntImm) and isinstance(h, tirx.IntImm) and int(w) != int(h):
            raise ValueError(f"{what} has size {int(h)} along axis {axis}, where the body declares {int(w)}")
    if all(isinstance(h, tirx.IntImm) or not isinstance(w, tirx.IntImm) for w, h in zip(want, have)):
        return value
    dims = [w if isinstance(w, tirx.IntImm) else h for w, h in zip(want, have)]
    return bb.match_cast(value, relax.TensorType(dims, value.ty.dtype))


def _is_constant(value) -> bool:
    if isinstance(value, tvm.ir.GenericConst):
        return True
    if isinstance(value, relax.ShapeExpr):
        return all(isinstance(v, tirx.IntImm) for v in value.values)
    return isinstance(value, (tirx.IntImm, tirx.FloatImm))


def _scalar(importer, value, what: str):
    """A scalar int64 PrimExpr of an ONNX scalar (or 1-element) tensor: a
    literal when known at import time, else read back (8 bytes)."""
    bb = importer.bb
    known = const_value(importer, value)
    if known is not None:
        if known.size != 1:
            raise ValueError(f"Loop: {what} must hold one value, got shape {known.shape}")
        return tirx.IntImm("int64", int(known.reshape(())))
    ty = value.ty
    if isinstance(ty, tvm.ir.PrimType):
        return value if str(ty.dtype) == "int64" else tirx.Cast("int64", value)
    if isinstance(ty, relax.ShapeType):
        var = tirx.Var(what, "int64")
        bb.match_cast(value, relax.ShapeType([var]))
        return var
    if str(ty.dtype) != "int64":
        value = bb.emit(relax.op.astype(value, "int64"))
    vector = bb.emit(relax.op.reshape(value, [1]))
    var = tirx.Var(what, "int64")
    bb.match_cast(bb.emit(relax.op.tensor_to_shape(vector)), relax.ShapeType([var]))
    return var


class _LoopBuilder:
    def __init__(self, importer, node, inputs, attrs):
        self.importer = importer
        self.bb = importer.bb
        self.body = attrs["body"]
        self.node = node
        self.inputs = list(inputs) + [None] * (2 - len(inputs))
        n_carried = len(self.inputs) - 2
        if len(self.body.input) != n_carried + 2:
            raise ValueError(f"Loop '{node.name}': the body takes {len(self.body.input)} inputs, "
                             f"expected {n_carried + 2} (iteration, condition, {n_carried} carried)")
        self.n_carried = n_carried
        self.n_scans = len(self.body.output) - 1 - n_carried
        if self.n_scans < 0 or len(node.output) != n_carried + self.n_scans:
            raise ValueError(f"Loop '{node.name}': the body's outputs do not match the node's")

    def build(self) -> list:
        importer, bb = self.importer, self.bb
        trip = None if self.inputs[0] is None else _scalar(importer, self.inputs[0], "max_trip")
        cond = None if self.inputs[1] is None else _scalar(importer, self.inputs[1], "cond")
        carried = [importer.with_shape(importer.as_tensor(v)) for v in self.inputs[2:]]
        # (onnx.checker, run by from_onnx, rejects bodies reading undefined names.)
        captured_names = sorted(n for n in _graph_free_names(self.body) if not _is_constant(importer.nodes[n]))
        captured = [importer.nodes[n] for n in captured_names]

        i = tirx.Var("i", "int64")
        params = [i]
        trip_param = cond_param = None
        if trip is not None:
            trip_param = tirx.Var("max_trip", "int64")
            params.append(trip_param)
        if cond is not None:
            cond_param = tirx.Var("cond", "int64")
            params.append(cond_param)
        # Carried values may change shape from one iteration to the next,
        # except sizes the body declares for its output as they are on entry.
        carried_params = [_carried_param(v, f"v{k}", info)
                          for k, (v, info) in enumerate(zip(carried, self.body.output[1:]))]
        captured_params = [_param_like(v, f"c{k}") for k, v in enumerate(captured)]
        outer_nodes = importer.nodes
        nodes = {n: v for n, v in outer_nodes.items() if _is_constant(v)}
        nodes.update(zip(captured_names, captured_params))
        importer.nodes = nodes
        bb.begin_scope(params + carried_params + captured_params)
        try:
            gv, scan_inits = self._function(i, trip_param, cond_param, carried_params, captured_params)
        finally:
            bb.end_scope()
            importer.nodes = outer_nodes
        args = [tirx.IntImm("int64", 0)] + [v for v in (trip, cond) if v is not None]
        result = bb.emit(relax.Call(gv, args + carried + scan_inits + captured))
        return [bb.emit(relax.TupleGetItem(result, k)) for k in range(self.n_carried + self.n_scans)]

    def _function(self, i, trip_param, cond_param, carried_params, captured_params):
        importer, bb, body = self.importer, self.bb, self.body
        head = [i] + [p for p in (trip_param, cond_param) if p is not None]

        def iteration():
            nodes = importer.nodes
            iteration_name, cond_name = body.input[0].name, body.input[1].name
            nodes[iteration_name] = bb.emit(relax.op.reshape(
                bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([i]))), []))
            nodes[cond_name] = relax.const(True, "bool") if cond_param is None else bb.emit(
                relax.op.not_equal(bb.emit(relax.op.reshape(
                    bb.emit(relax.op.shape_to_tensor(relax.ShapeExpr([cond_param]))), [])),
                    relax.const(0, "int64")))
            for value_info, param in zip(body.input[2:], carried_params):
                nodes[value_info.name] = param
            for init in body.initializer:
                nodes[init.name] = relax.const(importer.parse_array(init))
            for n in body.node:
                importer.construct_node(n)
            outs = [nodes[o.name] for o in body.output]
            next_cond = _scalar(importer, outs[0], "cond") if cond_param is not None else None
            next_carried = []
            for k, (value, param) in enumerate(zip(outs[1:1 + self.n_carried], carried_params)):
                value = importer.with_shape(importer.as_tensor(value))
                if str(value.ty.dtype) != str(param.ty.dtype) or value.ty.ndim != param.ty.ndim:
                    raise ValueError(f"Loop '{self.node.name}': carried value {k} changes from "
                                     f"{param.ty} to {value.ty}")
                next_carried.append(_as_declared(bb, value, param, f"Loop '{self.node.name}': carried value {k}"))
            slices = [importer.with_shape(importer.as_tensor(v)) for v in outs[1 + self.n_carried:]]
            next_head = [i + 1] + [p for p in (trip_param,) if p is not None] + [next_cond] * (cond_param is not None)
            return next_head, next_carried, slices

        go = tirx.IntImm("bool", 1)
        if trip_param is not None:
            go = tirx.LT(i, trip_param)
        if cond_param is not None:
            go = tirx.And(go, tirx.NE(cond_param, tirx.IntImm("int64", 0)))
        # (a condition the body computes is defined by its bindings: that
        # body stays in the loop function)
        gv, slices = recursive_loop(bb, _function_name(self.node), ",".join(self.node.output), head, carried_params,
                                    captured_params, iteration, go, outline=cond_param is None)
        scan_infos = body.output[1 + self.n_carried:]
        scan_inits = [relax.op.zeros(relax.ShapeExpr([0] + _empty_scan_dims(info, s.ty)), s.ty.dtype)
                      for info, s in zip(scan_infos, slices)]
        return gv, [bb.emit(z) for z in scan_inits]


def recursive_loop(bb, name: str, key: str, head: list, carried: list, captured: list, iteration, go,
                   outline: bool = False):
    """A module-level function ``name(*head, *carried, *scans, *captured)``
    that, while ``go`` (a condition on its parameters) holds, runs
    ``iteration`` and calls itself on what it returns, and otherwise
    returns ``(*carried, *scans)``; the caller emits the first call.

    ``head`` are scalar parameters (``head[0]`` the iteration number, 0 on
    the first call), ``carried`` and ``captured`` tensor parameters made in
    the caller's scope, whose values the caller bound before calling.
    ``iteration()`` emits one iteration's bindings and returns the next
    head, the next carried values and this iteration's scan values; each
    scan parameter accumulates its scan value along a new axis 0 (the
    first iteration's is the whole accumulation, so the initial scan
    arguments' other sizes need not match). ``key`` keeps BlockBuilder
    from merging this function with another whose body is the same.

    With ``outline`` (where the next head depends on the head alone), an
    iteration's bindings are a function of their own, ``name_step``, which
    the loop calls: TVM's FuseOps fuses a function's own bindings but not
    those inside an ``If``'s branch, so only then are an iteration's
    operators fused into a few kernels. Returns the function and the scan
    values (for their types)."""
    i = head[0]
    tvm_compat.begin_binding_block(bb)
    try:
        next_head, next_carried, slices = iteration()
        slices = [bb.emit(relax.op.expand_dims(v, 0)) for v in slices]
        scan_params = [_param_like(s, f"s{k}", keep_literals=False) for k, s in enumerate(slices)]
        bb.begin_scope(scan_params)
        try:
            grown = [_grow(bb, i, acc, piece) for acc, piece in zip(scan_params, slices)]
        finally:
            bb.end_scope()
        params = head + carried + scan_params + captured
        ret_ty = relax.TupleType([relax.TensorType(ndim=p.ty.ndim, dtype=p.ty.dtype) for p in carried + scan_params])
        # The recursive call needs the function's GlobalVar before its body
        # exists.
        stub = relax.Function.create_empty(params, ret_ty, True, tvm.ir.DictAttrs({"onnx_loop": key}))
        gv = bb.add_func(stub, name)
        if outline:
            block = tvm_compat.end_block(bb)
            step = relax.Function(params, relax.SeqExpr([block], relax.Tuple(next_carried + grown)), ret_ty,
                                  is_pure=True, attrs=tvm.ir.DictAttrs({"onnx_loop": key + ":step"}))
            step_gv = bb.add_func(relax.utils.copy_with_new_vars(step), name + "_step")
            tvm_compat.begin_binding_block(bb)
            outs = bb.emit(relax.Call(step_gv, params))
            next_carried = [bb.emit(relax.TupleGetItem(outs, k)) for k in range(len(next_carried))]
            grown = [bb.emit(relax.TupleGetItem(outs, len(next_carried) + k)) for k in range(len(grown))]
        again = bb.emit(relax.Call(gv, next_head + next_carried + grown + captured))
    finally:
        block = tvm_compat.end_block(bb)
    done = relax.Tuple(carried + scan_params)
    tvm_compat.begin_binding_block(bb)
    result = bb.emit(relax.If(go, relax.SeqExpr([block], again), relax.SeqExpr([], done)))
    func = relax.Function(params, relax.SeqExpr([tvm_compat.end_block(bb)], result), ret_ty, is_pure=True)
    bb.update_func(gv, func)
    return gv, slices


def _grow(bb, i, acc, piece):
    """``piece`` (one iteration's slice, axis 0 of length 1) appended to
    ``acc``; the first iteration's is the whole accumulation, so its
    other sizes need not match the empty initial value's."""
    tvm_compat.begin_binding_block(bb)
    joined = bb.emit(relax.op.concat([acc, piece], axis=0))
    later = relax.SeqExpr([tvm_compat.end_block(bb)], joined)
    return bb.emit(relax.If(tirx.EQ(i, tirx.IntImm("int64", 0)), relax.SeqExpr([], piece), later))


def _empty_scan_dims(value_info, sliced_ty: relax.TensorType) -> list[int]:
    """The per-iteration sizes of a scan output after zero iterations, as
    onnxruntime gives them: the body output's declared sizes, 0 where a
    size is symbolic (or, undeclared, the sizes Relax knows)."""
    declared = value_info.type.tensor_type
    if declared.HasField("shape") and len(declared.shape.dim) == sliced_ty.ndim - 1:
        return [d.dim_value if d.HasField("dim_value") else 0 for d in declared.shape.dim]
    return [int(d) if isinstance(d, tirx.IntImm) else 0 for d in sliced_ty.shape.values[1:]]


def _function_name(node) -> str:
    return "loop_" + function_name(node.name or (node.output[0] if node.output else "body"))


def function_name(text: str) -> str:
    """``text`` (an ONNX name) as a module function's name."""
    return "".join(c if c.isalnum() else "_" for c in text)


def convert_loop(importer, node, inputs, attrs) -> list:
    """The outputs of ONNX ``Loop`` node ``node`` (final carried values, then
    scan outputs), computed by a new recursive function; a loop carrying a
    sequence (a tuple, whose length may change from one iteration to the
    next) is unrolled instead."""
    if any(isinstance(getattr(v, "ty", None), relax.TupleType) for v in list(inputs)[2:]):
        return _unrolled(importer, node, list(inputs), attrs["body"])
    return _LoopBuilder(importer, node, inputs, attrs).build()


def _unrolled(importer, node, inputs, body) -> list:
    """A Loop's iterations one after another in the enclosing function:
    its trip count and every condition it tests must be known at import."""
    bb = importer.bb
    inputs = inputs + [None] * (2 - len(inputs))
    known = [const_value(importer, v) if v is not None else None for v in inputs[:2]]
    if (inputs[0] is not None and known[0] is None) or (inputs[1] is not None and known[1] is None):
        raise ValueError(f"Loop {node_label(node)} carries a sequence: it is unrolled, which needs its trip count and "
                         "condition known at import")
    if inputs[0] is None:
        raise ValueError(f"Loop {node_label(node)} carries a sequence: it is unrolled, which needs a trip count")
    trips, go = int(known[0].reshape(())), known[1] is None or bool(known[1].reshape(()))
    n_carried = len(inputs) - 2
    carried, scans = inputs[2:], [[] for _ in body.output[1 + n_carried:]]
    for i in range(trips):
        if not go:
            break
        given = {body.input[0].name: relax.const(np.array(i, np.int64), "int64"),
                 body.input[1].name: relax.const(True, "bool")}
        given.update((info.name, value) for info, value in zip(body.input[2:], carried))
        outs = importer._inlined(body, given)
        condition = const_value(importer, importer.as_tensor(outs[0]))
        if condition is None:
            raise ValueError(f"Loop {node_label(node)} carries a sequence: it is unrolled, which needs every "
                             "condition its body computes known at import")
        go = bool(condition.reshape(()))
        carried = [v if isinstance(getattr(v, "ty", None), relax.TupleType) else importer.as_tensor(v)
                   for v in outs[1:1 + n_carried]]
        for acc, value in zip(scans, outs[1 + n_carried:]):
            acc.append(bb.emit(relax.op.expand_dims(importer.as_tensor(value), 0)))
    if any(not acc for acc in scans):
        raise ValueError(f"Loop {node_label(node)} carries a sequence and runs no iteration: its scan outputs' "
                         "shapes are unknown")
    return carried + [bb.emit(relax.op.concat(acc, axis=0)) for acc in scans]
