"""What each instruction was generated for, so that an error at run time
names the model's node ("ONNX node '/Concat_3' (Concat): kernel ...").

The importer names the Relax variable each node binds after the node and
records, in the module attribute ``SOURCES_ATTR``, the description of each
such name (``name_after_sources``). Names survive TVM's passes up to the
point where calls become destination-passing kernel calls; there
``call_tir_rewrite`` turns them into each call's span, which the code
generator turns into the executable's source marks (``SourceMark`` in
``csrc/include/shapefn/executable.h``).

A binding the importer did not name (an intermediate of a converter, a
legalization's extra kernel, a shape function the lowering inserted before
the op it sizes) belongs to the next named binding of its block: the node it
was made for.
"""
from __future__ import annotations

import re

import tvm
from tvm import relax

from ..passes.placement import key
from ..tvm_compat import update_type

__all__ = ["SOURCES_ATTR", "call_tir_rewrite", "fuse_ops", "name_after_sources", "source_of"]

#: Module attribute: {variable name: description of what binds it}.
SOURCES_ATTR = "shapefn.sources"

# Names TVM's passes give the variables they make: never a source's.
_GENERATED_NAME = re.compile(r"(lv|gv|alloc|storage|shape|sv|_)\d*")
_ALLOC_TENSOR = tvm.ir.Op.get("relax.builtin.alloc_tensor")


def name_after_sources(mod: tvm.IRModule, sources: dict[int, tuple[str, str]]) -> tvm.IRModule:
    """``mod`` with each variable in ``sources`` (by ``key``: (name,
    description)) renamed after it, and the descriptions in ``SOURCES_ATTR``.
    An alias of a renamed variable (a graph output) takes its source too."""
    sources = dict(sources)
    aliases = _Aliases()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            aliases.visit_expr(func)
    # A node's output cast to its sizes (``c = match_cast(lv, ...)``) is
    # folded into the value it casts: that value is the node's too.
    for var, value in reversed(aliases.pairs):
        if var in sources and value not in sources:
            sources[value] = sources[var]
    renamer = _Renamer(sources)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = renamer.visit_expr(func)
    return mod.with_attr(SOURCES_ATTR, renamer.descriptions)


@relax.expr_functor.visitor
class _Aliases(relax.PyExprVisitor):
    """``pairs``: (var, var it is bound or cast from), by ``key``, in order."""

    def __init__(self):
        super().__init__()
        self.pairs: list[tuple[int, int]] = []

    def visit_var_binding_(self, binding) -> None:
        if isinstance(binding.value, relax.Var):
            self.pairs.append((key(binding.var), key(binding.value)))
        super().visit_var_binding_(binding)

    def visit_match_cast_(self, binding) -> None:
        if isinstance(binding.value, relax.Var):
            self.pairs.append((key(binding.var), key(binding.value)))
        super().visit_match_cast_(binding)


@relax.expr_functor.mutator
class _Renamer(relax.PyExprMutator):
    def __init__(self, sources: dict[int, tuple[str, str]]):
        super().__init__()
        self.sources = sources
        self.descriptions: dict[str, str] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        source = self.sources.get(key(binding.var))
        if source is None and isinstance(binding.value, relax.Var):
            source = self.sources.get(key(binding.value))
        if source is None:
            super().visit_var_binding_(binding)
            return
        self.builder_.emit_normalized(relax.VarBinding(*self._renamed(binding, source)))

    def visit_match_cast_(self, binding: relax.MatchCast) -> None:
        source = self.sources.get(key(binding.var))
        if source is None:
            super().visit_match_cast_(binding)
            return
        self.builder_.emit_normalized(relax.MatchCast(*self._renamed(binding, source), binding.ty))

    def _renamed(self, binding, source: tuple[str, str]) -> tuple[relax.Var, relax.Expr]:
        """A variable named after ``source`` in place of ``binding``'s, and its value."""
        value = self.builder_.normalize(self.visit_expr(binding.value))
        var = type(binding.var)(self._named(source), binding.var.ty)
        self.sources.setdefault(key(var), source)
        self.set_var_remap(binding.var, var)
        return var, value

    def _named(self, source: tuple[str, str]) -> str:
        """A fresh name after ``source``'s output, recorded with its description."""
        name = self._unique(source[0])
        self.descriptions[name] = source[1]
        return name

    def _unique(self, name: str) -> str:
        name = re.sub(r"\W", "_", name) or "value"
        if _GENERATED_NAME.fullmatch(name) or name[0].isdigit():
            name = "v" + name
        return _unique_in(name, self.descriptions)


def fuse_ops(mod: tvm.IRModule) -> tvm.IRModule:
    """TVM's ``FuseOps``, the call of each fused group bound to a variable
    with the source of the group's calls, one node or several ("ONNX node
    'conv' (Conv) and ONNX node 'relu' (Relu)"). ``FuseOps`` names the
    variables of a group anew, inside and out, but keeps the spans of the
    calls it moves into the group: the calls get their sources as spans
    first."""
    descriptions = _descriptions(mod)
    if not descriptions:
        return relax.transform.FuseOps()(mod)
    spans = _SpanCalls(descriptions)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = spans.function(func)
    mod = relax.transform.FuseOps()(mod)
    namer = _FusedCallNames(mod, descriptions)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function) and not _is_primitive(func):
            mod[gv] = namer.visit_expr(func)
    return mod.with_attr(SOURCES_ATTR, namer.descriptions)


def _descriptions(mod: tvm.IRModule) -> dict[str, str]:
    found = mod.attrs.get(SOURCES_ATTR) if mod.attrs is not None else None
    return {str(k): str(v) for k, v in found.items()} if found else {}


def _is_primitive(func: relax.Function) -> bool:
    return func.attrs is not None and bool(func.attrs.get("Primitive", False))


@relax.expr_functor.visitor
class _CallSources(relax.PyExprVisitor):
    """``found``: the sources of the calls visited, each once, in order."""

    def __init__(self):
        super().__init__()
        self.found: dict[str, None] = {}

    def visit_var_binding_(self, binding) -> None:
        source = source_of(binding.value) if isinstance(binding.value, relax.Call) else None
        if source:
            self.found[source] = None
        super().visit_var_binding_(binding)


# A fused group's source names at most this many nodes.
_MAX_FUSED_NAMED = 4


@relax.expr_functor.mutator
class _FusedCallNames(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, descriptions: dict[str, str]):
        super().__init__(mod)
        self.mod = mod
        self.descriptions = dict(descriptions)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        source = None
        if binding.var.name not in self.descriptions and isinstance(value, relax.Call) \
                and isinstance(value.op, relax.GlobalVar):
            callee = self.mod[value.op]
            if isinstance(callee, relax.Function) and _is_primitive(callee):
                source = _group_source(callee)
        if source is None:
            super().visit_var_binding_(binding)
            return
        var = type(binding.var)(_unique_in("fused", self.descriptions), binding.var.ty)
        self.descriptions[var.name] = source
        self.set_var_remap(binding.var, var)
        self.builder_.emit_normalized(relax.VarBinding(var, self.builder_.normalize(self.visit_expr(value))))


def _group_source(callee: relax.Function) -> str | None:
    """The nodes a fused function computes, by its calls' spans."""
    calls = _CallSources()
    calls.visit_expr(callee)
    nodes = list(calls.found)
    if not nodes:
        return None
    text = " and ".join(nodes[:_MAX_FUSED_NAMED])
    if len(nodes) > _MAX_FUSED_NAMED:
        text += f" and {len(nodes) - _MAX_FUSED_NAMED} more"
    return text


def _unique_in(name: str, taken) -> str:
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    return candidate


def source_of(call: relax.Call) -> str | None:
    """The description ``call_tir_rewrite`` gave ``call``; "" for a call made
    for nothing the model names, None for one it did not see."""
    span = call.span
    return None if span is None else span.source_name.name


def call_tir_rewrite(mod: tvm.IRModule) -> tvm.IRModule:
    """TVM's ``CallTIRRewrite`` (``call_tir`` -> an allocation and a
    destination-passing call), after which every call of a binding has as
    span the description of its source ("" for none). ``CallTIRRewrite``
    drops spans: the calls it makes take their ``call_tir``'s in order, the
    allocations the next kernel call's."""
    descriptions = _descriptions(mod)
    if not descriptions:
        return relax.transform.CallTIRRewrite()(mod)
    before = _SpanCalls(descriptions)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = before.function(func)
    mod = relax.transform.CallTIRRewrite()(mod)
    after = _SpanRewrittenCalls(before.dps_sources)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = after.function(func)
    return mod


def _with_span(call: relax.Call, source: str) -> relax.Call:
    spanned = relax.Call(call.op, call.args, call.attrs, call.ty_args,
                         tvm.ir.Span(tvm.ir.SourceName(source), 0, 0, 0, 0))
    update_type(spanned, call.ty)
    return spanned


_DPS_OPS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad", "relax.call_dps_packed")


def _is_dps(call: relax.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name in _DPS_OPS


class _Spans:
    """Sets the spans of the calls bound in a function's blocks, its
    branches' included, visiting bindings in order (a branch's before the
    binding of its ``If``). Only blocks, bindings and calls are rebuilt,
    with the types they had: a span is no part of a type, so nothing needs
    normalizing again (an ``ExprMutator`` would visit every expression)."""

    def function(self, func: relax.Function) -> relax.Function:
        body = self._expr(func.body)
        if body.same_as(func.body):
            return func
        return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)

    def begin_block(self, block) -> None:
        """Called before the bindings of ``block`` are visited."""

    def source(self, binding, call: relax.Call) -> str | None:
        """The span ``call`` (bound by ``binding``) gets; None: as it is."""
        raise NotImplementedError

    def _expr(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.SeqExpr):
            blocks = [self._block(block) for block in expr.blocks]
            body = self._expr(expr.body)
            if body.same_as(expr.body) and all(new.same_as(old) for new, old in zip(blocks, expr.blocks)):
                return expr
            return _typed(relax.SeqExpr(blocks, body, expr.span), expr)
        if isinstance(expr, relax.If):
            true_branch, false_branch = self._expr(expr.true_branch), self._expr(expr.false_branch)
            if true_branch.same_as(expr.true_branch) and false_branch.same_as(expr.false_branch):
                return expr
            return _typed(relax.If(expr.cond, true_branch, false_branch, expr.span), expr)
        return expr

    def _block(self, block):
        self.begin_block(block)
        bindings, changed = [], False
        for binding in block.bindings:
            value = self._expr(binding.value)
            if isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call):
                source = self.source(binding, value)
                if source is not None:
                    value = _with_span(value, source)
            if value.same_as(binding.value):
                bindings.append(binding)
                continue
            changed = True
            if isinstance(binding, relax.MatchCast):
                bindings.append(relax.MatchCast(binding.var, value, binding.ty, binding.span))
            else:
                bindings.append(relax.VarBinding(binding.var, value, binding.span))
        return type(block)(bindings, block.span) if changed else block


def _typed(new: relax.Expr, old: relax.Expr) -> relax.Expr:
    update_type(new, old.ty)
    return new


class _SpanCalls(_Spans):
    """Each call of a binding gets its source as span; ``dps_sources`` lists
    the sources of the destination-passing ones in visiting order."""

    def __init__(self, descriptions: dict[str, str]):
        self.descriptions = descriptions
        self.dps_sources: list[str] = []
        self._sources: dict[int, str] = {}

    def begin_block(self, block) -> None:
        """The source of each binding of ``block``: its var's, else the next named one's."""
        current = ""
        for binding in reversed(list(block.bindings)):
            current = self.descriptions.get(binding.var.name, current)
            self._sources[key(binding)] = current

    def source(self, binding, call: relax.Call) -> str:
        source = self._sources.get(key(binding), "")
        if _is_dps(call):
            self.dps_sources.append(source)
        return source


class _SpanRewrittenCalls(_Spans):
    """Spans for the calls ``CallTIRRewrite`` made, in the order
    ``_SpanCalls`` met their ``call_tir``s: a kernel call takes the next of
    ``dps_sources``; an allocation (just before its kernel call) the same."""

    def __init__(self, dps_sources: list[str]):
        self.pending = list(reversed(dps_sources))

    def source(self, binding, call: relax.Call) -> str | None:
        if call.span is not None:
            return None
        if call.op.same_as(_ALLOC_TENSOR):
            return self.pending[-1] if self.pending else ""
        if not isinstance(call.op, tvm.ir.Op):
            return self.pending.pop() if self.pending else ""
        return None
