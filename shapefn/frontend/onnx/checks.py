"""What ``from_onnx`` checks of a model before converting anything: that
shapefn imports every operator (``check_operators``), that onnx.checker
accepts every node as written (``check_nodes``), and that ONNX's shape
inference accepts the model as onnxruntime runs it (``check_shapes``);
and the copy of a model those checks see (``for_checker``)."""
from __future__ import annotations

import onnx

from ...runtime.errors import InvalidOnnxModel, UnsupportedOnnxOp
from .functions import all_nodes, expand_functions, opset_of
from .registry import DEFAULT_DOMAINS, qualified_name, supported_ops

# onnxruntime's contrib operators, which onnx.checker has no schemas for.
_MICROSOFT_DOMAIN = "com.microsoft"
# The domain nodes the checker has no schema for are moved to, on its copy.
_UNCHECKED_DOMAIN = "shapefn.unchecked"


def node_label(node) -> str:
    """A node as messages name it: its name, or its first output."""
    if node.name:
        return repr(node.name)
    return f"(unnamed, output {node.output[0]!r})" if node.output else "(unnamed)"


def check_operators(model: onnx.ModelProto, supported: set[str], where: str = "") -> None:
    """Raises ``UnsupportedOnnxOp`` listing every operator of ``model``
    (subgraphs included) that is not imported, with its nodes (``where``
    says where they were found): in ONNX's domain, those not in
    ``supported``; in another, those the registry has no converter for
    (``registry.supported_ops``). Then for a graph input or output, or a
    Cast's result, of a type the VM does not take."""
    unsupported: dict[str, list[str]] = {}
    graph_nodes = list(all_nodes(model.graph))
    taken = {domain: supported_ops(domain) for domain in {n.domain for n in graph_nodes} - set(DEFAULT_DOMAINS)}
    taken.update(dict.fromkeys(DEFAULT_DOMAINS, supported))
    for node in graph_nodes:
        if node.op_type not in taken[node.domain]:
            unsupported.setdefault(qualified_name(node.domain, node.op_type), []).append(node_label(node))
    if unsupported:
        listing = "; ".join(f"{op} (node{'s' if len(nodes) > 1 else ''} {', '.join(nodes)})"
                            for op, nodes in sorted(unsupported.items()))
        raise UnsupportedOnnxOp(f"ONNX operators not supported{where}: {listing}", unsupported)
    initialized = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        kind = value.type.WhichOneof("value")
        if kind == "optional_type" and value.type.optional_type.elem_type.WhichOneof("value") == "tensor_type":
            continue  # (an optional tensor is a tensor, or absent)
        if kind == "optional_type" and value.type.optional_type.elem_type.WhichOneof("value") == "sequence_type":
            kind = "sequence_type"  # (an optional sequence is a sequence, present)
        if value.name not in initialized and kind == "sequence_type":
            raise UnsupportedOnnxOp(f"graph input '{value.name}' is a sequence: from_onnx imports it for sequences "
                                    f"of a given length (sequence_lengths={{{value.name!r}: n}})")
        if value.name not in initialized and kind in ("optional_type", "map_type"):
            raise UnsupportedOnnxOp(f"graph input '{value.name}' is a {kind.split('_')[0]}: shapefn takes tensors "
                                    "and sequences of tensors as inputs")
        elem_type = value.type.tensor_type.elem_type if kind == "tensor_type" else 0
        if value.name not in initialized and elem_type in _NOT_TAKEN:
            raise UnsupportedOnnxOp(f"graph input '{value.name}' is a tensor of {_type_name(elem_type)}: "
                                    f"{_TAKEN}")
    for value in model.graph.output:
        if value.type.WhichOneof("value") == "tensor_type" and value.type.tensor_type.elem_type in _NOT_TAKEN:
            raise UnsupportedOnnxOp(f"graph output '{value.name}' is a tensor of "
                                    f"{_type_name(value.type.tensor_type.elem_type)}: {_TAKEN}")
    for node in all_nodes(model.graph):
        to = next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
        if to in _NOT_TAKEN:
            raise UnsupportedOnnxOp(f"ONNX node Cast {node_label(node)} casts to {_type_name(to)}: {_TAKEN}",
                                    {"Cast": [node_label(node)]})


# Element types the VM's arguments cannot have (numpy has no such types;
# ml_dtypes' are not taken).
_T = onnx.TensorProto
_TAKEN = "shapefn's VM takes bool, integer and float16/32/64 tensors"
_NOT_TAKEN = {_T.BFLOAT16, _T.FLOAT8E4M3FN, _T.FLOAT8E4M3FNUZ, _T.FLOAT8E5M2, _T.FLOAT8E5M2FNUZ, _T.UINT4, _T.INT4,
              _T.FLOAT4E2M1, _T.FLOAT8E8M0, _T.UINT2, _T.INT2, _T.STRING}


def _type_name(elem_type: int) -> str:
    return onnx.TensorProto.DataType.Name(elem_type)


def check_nodes(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(for_checker(model))
    except onnx.checker.ValidationError as err:
        raise InvalidOnnxModel(f"the ONNX model is malformed: {err}") from None


def check_shapes(model: onnx.ModelProto) -> None:
    """What onnxruntime checks when it loads a model: each node's
    attributes and static shapes against its operator's inference
    (negative pads, a split larger than its axis, a convolution window
    larger than its input), which TVM would otherwise find only while
    compiling, naming no node. (Input types are _check_types', whose
    messages name the input.)"""
    try:
        _infer_shapes(model)
    except onnx.shape_inference.InferenceError as err:
        # ONNX's inference of some function bodies fails where that of
        # their expansion passes (MeanVarianceNormalization's default axes).
        try:
            _infer_shapes(expand_functions(model, set(), DEFAULT_DOMAINS))
        except (onnx.shape_inference.InferenceError, RuntimeError):  # (RuntimeError: ONNX's inliner's own checks)
            raise InvalidOnnxModel(f"the ONNX model fails ONNX's shape inference: {err}") from None


def _infer_shapes(model: onnx.ModelProto) -> None:
    onnx.shape_inference.infer_shapes(for_checker(model, shape_unshaped=False), check_type=False, strict_mode=True)


def for_checker(model: onnx.ModelProto, shape_unshaped: bool = True) -> onnx.ModelProto:
    """``model`` as onnx.checker should see it, on a copy when it differs:

    * the checker requires a shape on every graph input and output; TVM's
      importer (and so shapefn) takes ones of unknown rank, so those get an
      empty shape that nothing reads (with ``shape_unshaped``: shape
      inference would read it as rank 0);
    * nodes it has no current schema for although they are imported (and
      run by onnxruntime) — Microsoft contrib operators, operators the
      model's opset predates (LayerNormalization before opset 17, which
      onnxruntime registers as a contrib operator) or deprecates
      (GroupNormalization-18) — move to a domain of their own, whose nodes
      it does not check (it still checks how the graph uses them)."""
    opset = opset_of(model, DEFAULT_DOMAINS)

    def unchecked(node):
        if node.domain == _MICROSOFT_DOMAIN:
            return True
        if node.domain not in DEFAULT_DOMAINS:
            return False
        return not onnx.defs.has(node.op_type, opset, "") or onnx.defs.get_schema(node.op_type, opset, "").deprecated

    def unshaped(values):
        if not shape_unshaped:
            return []
        return [v for v in values if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")]

    if not unshaped([*model.graph.input, *model.graph.output]) and not any(map(unchecked, all_nodes(model.graph))):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in unshaped([*copy.graph.input, *copy.graph.output]):
        value.type.tensor_type.shape.SetInParent()
    moved = False
    for node in all_nodes(copy.graph):
        if unchecked(node):
            node.domain = _UNCHECKED_DOMAIN
            moved = True
    if moved:
        copy.opset_import.append(onnx.helper.make_opsetid(_UNCHECKED_DOMAIN, 1))
    return copy
