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

from .placement import key

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
            mod[gv] = spans.visit_expr(func)
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
            mod[gv] = before.visit_expr(func)
    mod = relax.transform.CallTIRRewrite()(mod)
    after = _SpanRewrittenCalls(before.dps_sources)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = after.visit_expr(func)
    return mod


def _with_span(call: relax.Call, source: str) -> relax.Call:
    return relax.Call(call.op, call.args, call.attrs, call.ty_args, tvm.ir.Span(tvm.ir.SourceName(source), 0, 0, 0, 0))


_DPS_OPS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_tir_with_grad", "relax.call_dps_packed")


def _is_dps(call: relax.Call) -> bool:
    return isinstance(call.op, tvm.ir.Op) and call.op.name in _DPS_OPS


@relax.expr_functor.mutator
class _SpanCalls(relax.PyExprMutator):
    """Each call of a binding gets its source as span; ``dps_sources`` lists
    the sources of the destination-passing ones in visiting order."""

    def __init__(self, descriptions: dict[str, str]):
        super().__init__()
        self.descriptions = descriptions
        self.dps_sources: list[str] = []
        self._sources: dict[int, str] = {}

    def visit_binding_block_(self, block):
        self._look_ahead(block)
        return super().visit_binding_block_(block)

    def visit_dataflow_block_(self, block):
        self._look_ahead(block)
        return super().visit_dataflow_block_(block)

    def _look_ahead(self, block) -> None:
        """The source of each binding of ``block``: its var's, else the next named one's."""
        current = ""
        for binding in reversed(list(block.bindings)):
            current = self.descriptions.get(binding.var.name, current)
            self._sources[key(binding)] = current

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if not isinstance(binding.value, relax.Call):
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        source = self._sources.get(key(binding), "")
        if _is_dps(value):
            self.dps_sources.append(source)
        self.builder_.emit_normalized(relax.VarBinding(binding.var, self._spanned(value, source)))

    def _spanned(self, call: relax.Call, source: str) -> relax.Call:
        return self.builder_.normalize(_with_span(call, source))


@relax.expr_functor.mutator
class _SpanRewrittenCalls(relax.PyExprMutator):
    """Spans for the calls ``CallTIRRewrite`` made, in the order
    ``_SpanCalls`` met their ``call_tir``s: a kernel call takes the next of
    ``dps_sources``; an allocation (just before its kernel call) the same."""

    def __init__(self, dps_sources: list[str]):
        super().__init__()
        self.pending = list(reversed(dps_sources))

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        if not isinstance(value, relax.Call) or value.span is not None:
            super().visit_var_binding_(binding)
            return
        if value.op.same_as(_ALLOC_TENSOR):
            source = self.pending[-1] if self.pending else ""
        elif not isinstance(value.op, tvm.ir.Op):
            source = self.pending.pop() if self.pending else ""
        else:
            super().visit_var_binding_(binding)
            return
        value = self.builder_.normalize(_with_span(self.visit_expr(value), source))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))
