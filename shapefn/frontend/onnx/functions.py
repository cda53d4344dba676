"""Operators ONNX defines as functions of other operators (Attention,
RotaryEmbedding, Celu, MeanVarianceNormalization, the window functions...)
are imported as their function bodies when shapefn has no converter of its
own for them, expanded by ONNX's own inliner (``onnx.inliner``).

The expansion is ONNX's definition of the operator, so it computes what
ONNX's reference computes (the suite's ``_expanded`` cases are the same
graphs). A fused kernel may later replace a body that matters for speed.

A context-dependent function (Attention's body depends on which optional
inputs are present and on their types) is built here for each node from
the types ONNX's shape inference gives its inputs, added to the model as a
local function and inlined: ONNX's inliner builds such bodies itself but
fails on a node whose absent optional input is followed by a present one
(Attention with past keys and no mask).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from ...runtime.errors import InvalidOnnxModel

# Operators TVM's importer has a converter for under the same name in
# another domain (onnxruntime's com.microsoft Attention takes different
# inputs and attributes): ONNX's own are expanded.
_EXPANDED_DESPITE_A_CONVERTER = {"Attention"}
# A function body may call functions itself (Celu calls Elu): expansion
# repeats until nothing is left to expand, at most this many times.
_MAX_ROUNDS = 8
# ONNX's preview operators (FlexAttention), imported as their definitions.
PREVIEW_DOMAIN = "ai.onnx.preview"
# The domain of the local functions built for context-dependent bodies.
_LOCAL_DOMAIN = "shapefn.expanded"
# Integer results of at most this many elements computed from constants
# alone are folded (``fold_constant_sizes``).
_MAX_FOLDED = 64


def expand_functions(model: onnx.ModelProto, converted: set[str], domains: tuple[str, ...]) -> onnx.ModelProto:
    """``model`` with every node of ``expandable`` operators replaced by
    its function body; ``model`` itself if there is none."""
    for _ in range(_MAX_ROUNDS):
        ops = expandable(model, converted, domains)
        if not ops:
            return model
        opset = opset_of(model, domains)
        contextual = {op for op in ops if not onnx.defs.get_schema(op, opset, "").has_function}
        if contextual:
            model = _inline_contextual(model, contextual, opset, domains)
        if ops - contextual:
            model = _with_default_attributes(model, ops - contextual, opset, domains)
            model = onnx.inliner.inline_selected_functions(model, [("", op) for op in sorted(ops - contextual)],
                                                           inline_schema_functions=True)
    return model


def _with_default_attributes(model: onnx.ModelProto, ops: set[str], opset: int,
                             domains: tuple[str, ...]) -> onnx.ModelProto:
    """``model`` with the nodes of ``ops`` given every attribute their schema
    defaults and they leave out: ONNX's inliner drops a body's reference to
    an attribute the node does not set (HannWindow's ``output_datatype``
    leaves its Cast without a type), where the default is meant."""
    model = _copy(model)
    for node in all_nodes(model.graph):
        if node.domain not in domains or node.op_type not in ops:
            continue
        present = {a.name for a in node.attribute}
        for name, attr in onnx.defs.get_schema(node.op_type, opset, "").attributes.items():
            if name not in present and attr.default_value.name:
                node.attribute.append(attr.default_value)
    return model


def expandable(model: onnx.ModelProto, converted: set[str], domains: tuple[str, ...]) -> set[str]:
    """The operators of ``model``'s nodes in ``domains`` that are not in
    ``converted`` (or are ones whose ONNX definition is preferred) and have
    a function body at the model's opset."""
    opset = opset_of(model, domains)
    return {node.op_type for node in all_nodes(model.graph)
            if node.domain in domains and _expands(node.op_type, opset, converted)}


def all_nodes(graph):
    """The nodes of ``graph`` and of its subgraphs, recursively."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from all_nodes(a.g)
            for g in a.graphs:
                yield from all_nodes(g)


def fold_constant_sizes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each top-level node whose inputs are all constants and
    whose outputs are small integer or bool tensors replaced by Constants,
    evaluated by ONNX's reference implementation.

    Function bodies compute their sizes from their attributes (Attention's
    head counts: the grouped heads' repeat count, a ``Where`` of a
    ``Div``): folded, such a size reaches an ``Expand`` as a constant, and
    the expansion keeps the sizes it knows (batch, sequence length). Graphs
    written out the same way (LayerNormalization's expansion: the reduced
    shape a ``ConstantOfShape`` of ``Size(Shape(x)) - axis``) import only
    so: every model is folded."""
    graph = model.graph
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    try:
        types = _value_types(model, data_prop=True)
    except onnx.shape_inference.InferenceError:
        # (ONNX's inference refuses what TVM's importer takes, a contrib
        # operator without its domain's opset import; check_shapes, next,
        # decides whether the model is invalid)
        return model
    nodes, folded = [], False
    for node in graph.node:
        inputs = [name for name in node.input if name]
        values = None
        if node.op_type == "Shape":
            values = _static_sizes(node, types.get(node.input[0]))
        elif all(name in known for name in inputs) and not any(a.HasField("g") or a.graphs for a in node.attribute):
            values = _evaluate(node, {name: known[name] for name in inputs})
        if values is None:
            nodes.append(node)
            continue
        known.update(zip(node.output, values))
        if node.op_type == "Constant" or not all(v.dtype.kind in "biu" and v.size <= _MAX_FOLDED for v in values):
            nodes.append(node)
            continue
        nodes.extend(onnx.helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
                     for name, value in zip(node.output, values))
        folded = True
    if not folded:
        return model
    model = _copy(model)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _static_sizes(node: onnx.NodeProto, ty: onnx.TypeProto | None) -> list[np.ndarray] | None:
    """The output of ``Shape`` where the sizes it reads are known."""
    if ty is None or not ty.tensor_type.HasField("shape"):
        return None
    dims = ty.tensor_type.shape.dim
    attrs = {a.name: a.i for a in node.attribute}
    start, end = slice(attrs.get("start", 0), attrs.get("end", len(dims))).indices(len(dims))[:2]
    if not all(d.HasField("dim_value") for d in dims[start:end]):
        return None
    return [np.array([d.dim_value for d in dims[start:end]], np.int64)]


def _evaluate(node: onnx.NodeProto, feeds: dict) -> list[np.ndarray] | None:
    """The outputs of ``node`` on ``feeds`` (None if the reference
    implementation cannot compute them, or they are not tensors)."""
    if node.op_type.startswith("Random") or node.op_type in ("Bernoulli", "Multinomial"):
        return None
    try:
        values = ReferenceEvaluator(node).run(None, feeds)
    except Exception:  # (an operator it lacks, or bad inputs: the importer then reports the node)
        return None
    return [np.asarray(v) for v in values] if all(isinstance(v, np.ndarray | np.generic) for v in values) else None


def opset_of(model: onnx.ModelProto, domains: tuple[str, ...]) -> int:
    """The version of the model's opset import for ``domains`` (1 if none)."""
    return next((o.version for o in model.opset_import if o.domain in domains), 1)


def _expands(op_type: str, opset: int, converted: set[str]) -> bool:
    if op_type in converted and op_type not in _EXPANDED_DESPITE_A_CONVERTER:
        return False
    if not onnx.defs.has(op_type, opset, ""):
        return False
    schema = onnx.defs.get_schema(op_type, opset, "")
    return schema.has_function or schema.has_context_dependent_function


def expand_preview(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the nodes of ONNX's preview operators
    (``ai.onnx.preview``: FlexAttention) replaced by the context-dependent
    function bodies ONNX defines them by; ``model`` itself without any.
    There are no converters of preview operators: this is how they import."""
    opset = opset_of(model, (PREVIEW_DOMAIN,))
    ops = {node.op_type for node in all_nodes(model.graph) if node.domain == PREVIEW_DOMAIN
           and onnx.defs.has(node.op_type, opset, PREVIEW_DOMAIN)
           and onnx.defs.get_schema(node.op_type, opset, PREVIEW_DOMAIN).has_context_dependent_function}
    return _inline_contextual(model, ops, opset, (PREVIEW_DOMAIN,), PREVIEW_DOMAIN) if ops else model


def _inline_contextual(model: onnx.ModelProto, ops: set[str], opset: int,
                       domains: tuple[str, ...], schema_domain: str = "") -> onnx.ModelProto:
    """``model`` with each node of ``ops`` (context-dependent functions of
    ``schema_domain``) calling a local function built for it, inlined."""
    model = _copy(model)
    types = _value_types(model)
    for index, node in enumerate(n for n in all_nodes(model.graph) if n.domain in domains and n.op_type in ops):
        schema = onnx.defs.get_schema(node.op_type, opset, schema_domain)
        version = max(v for v in schema.context_dependent_function_opset_versions if v <= opset)
        inputs = [types.get(name, onnx.TypeProto()).SerializeToString() for name in node.input]
        body = onnx.FunctionProto()
        try:
            body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), inputs))
        except Exception as err:  # noqa: BLE001 - ONNX's builder checks the node's attributes and types
            raise InvalidOnnxModel(f"ONNX's definition of {node.op_type} cannot be built for node "
                                   f"{node.name or node.output[0]!r}: {err}") from None
        body.name, body.domain = f"{node.op_type}_{index}", _LOCAL_DOMAIN
        _bind_attribute_references(body.node, {a.name: a for a in node.attribute})
        model.functions.append(body)
        node.op_type, node.domain = body.name, _LOCAL_DOMAIN
        del node.attribute[:]  # (bound in the body)
    model.opset_import.append(onnx.helper.make_opsetid(_LOCAL_DOMAIN, 1))
    inlined = onnx.inliner.inline_local_functions(model, convert_version=True)
    del inlined.opset_import[[o.domain for o in inlined.opset_import].index(_LOCAL_DOMAIN)]
    return inlined


def _bind_attribute_references(nodes, given: dict) -> None:
    """Each attribute of ``nodes`` (subgraphs included) that refers to one of
    the calling node's (``ref_attr_name``: CenterCropPad's ``axes`` in a
    Constant) replaced by the value ``given``; one referring to an attribute
    not given is dropped, as ONNX defines."""
    for node in nodes:
        bound = []
        for attr in node.attribute:
            if attr.ref_attr_name:
                if attr.ref_attr_name in given:
                    value = onnx.AttributeProto()
                    value.CopyFrom(given[attr.ref_attr_name])
                    value.name = attr.name
                    bound.append(value)
                continue
            for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _bind_attribute_references(graph.node, given)
            bound.append(attr)
        del node.attribute[:]
        node.attribute.extend(bound)


def _value_types(model: onnx.ModelProto, data_prop: bool = False) -> dict[str, onnx.TypeProto]:
    """The type of every value ONNX's shape inference knows, subgraphs included."""
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=data_prop)
    types = {}

    def collect(graph):
        for value in [*graph.input, *graph.value_info, *graph.output]:
            types.setdefault(value.name, value.type)
        for init in graph.initializer:
            types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims)))
        for node in graph.node:
            for a in node.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    collect(g)

    collect(inferred.graph)
    return types


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy
