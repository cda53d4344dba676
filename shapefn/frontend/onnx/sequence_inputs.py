"""Sequence-typed graph inputs as tensors: a model whose input ``x`` is a
sequence of tensors, imported for sequences of a given length ``n``, takes
``n`` tensor inputs ``x_0`` … ``x_{n-1}`` in its place (in the sequence's
position), which a ``SequenceConstruct`` gathers into ``x`` (an empty
sequence is ``SequenceEmpty``). Sequences made inside a model are Relax
tuples of a length known at import; this gives an input one too."""
from __future__ import annotations

from collections.abc import Mapping

import onnx
from onnx import helper


def _sequence_type(value_type: onnx.TypeProto) -> onnx.TypeProto.Sequence | None:
    """The sequence-of-tensors type ``value_type`` is, or is an optional of."""
    if value_type.WhichOneof("value") == "optional_type":
        value_type = value_type.optional_type.elem_type
    if value_type.WhichOneof("value") == "sequence_type" \
            and value_type.sequence_type.elem_type.WhichOneof("value") == "tensor_type":
        return value_type.sequence_type
    return None


def sequence_inputs(model: onnx.ModelProto) -> list[str]:
    """The names of the model's graph inputs that are sequences of tensors
    (or optional ones, which a sequence given for them makes present)."""
    initialized = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initialized and _sequence_type(i.type) is not None]


def is_sequence(value: onnx.ValueInfoProto) -> bool:
    """Whether a graph input or output is a sequence (an optional one too)."""
    return _sequence_type(value.type) is not None


def element_names(name: str, length: int, taken: set[str]) -> list[str]:
    """``name_0``, ``name_1``, …, lengthened with ``_`` where the model uses the name."""
    stem = name
    while any(f"{stem}_{k}" in taken for k in range(length)):
        stem += "_"
    return [f"{stem}_{k}" for k in range(length)]


def sequences_as_tensors(model: onnx.ModelProto, lengths: Mapping[str, int]) -> onnx.ModelProto:
    """``model`` with each sequence input named in ``lengths`` taken as that
    many tensor inputs of the element type, each with sizes of its own
    where the type gives no number (the tensors of a sequence may differ
    in shape, whatever the type names their sizes)."""
    names = sequence_inputs(model)
    unknown = sorted(set(lengths) - set(names))
    if unknown:
        raise ValueError(f"sequence_lengths names {unknown}, which are not sequence inputs of the model "
                         f"(those are {names})")
    for name, length in lengths.items():
        if not isinstance(length, int) or length < 0:
            raise ValueError(f"sequence_lengths[{name!r}] must be a count of tensors (an int >= 0), got {length!r}")
    if not lengths:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    taken = {v.name for v in (*graph.input, *graph.initializer, *graph.output, *graph.value_info)}
    taken |= {name for node in graph.node for name in node.output}
    inputs, gathers = [], []
    for value in graph.input:
        if value.name not in lengths:
            inputs.append(value)
            continue
        element = _sequence_type(value.type).elem_type.tensor_type
        elements = element_names(value.name, lengths[value.name], taken)
        for k, element_name in enumerate(elements):
            typed = helper.make_tensor_value_info(element_name, element.elem_type, None)
            if element.HasField("shape"):
                for d, dim in enumerate(element.shape.dim):
                    added = typed.type.tensor_type.shape.dim.add()
                    if dim.HasField("dim_value"):
                        added.dim_value = dim.dim_value
                    else:
                        added.dim_param = f"{dim.dim_param or value.name}_{k}_d{d}"
            inputs.append(typed)
        optional = value.type.WhichOneof("value") == "optional_type"
        gathered = element_names(value.name, 1, taken | set(elements))[0] if optional else value.name
        if elements:
            gathers.append(helper.make_node("SequenceConstruct", elements, [gathered]))
        else:
            gathers.append(helper.make_node("SequenceEmpty", [], [gathered], dtype=element.elem_type))
        if optional:  # (present: the sequence given)
            gathers.append(helper.make_node("Optional", [gathered], [value.name]))
    del graph.input[:]
    graph.input.extend(inputs)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(gathers + nodes)
    return copy
