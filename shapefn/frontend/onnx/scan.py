"""ONNX ``Scan`` (opset 9 and later) rewritten as the ``Loop`` it is.

A Scan runs its body once per slice of its scan inputs along their scan
axes, carrying state variables, and stacks the body's scan outputs. Written
as a Loop (which shapefn imports: ``loop.py``), the trip count is the
first scan input's extent along its axis; the body gathers slice ``i`` of
each scan input (``len - 1 - i`` in reverse), which the Scan body's nodes
then read under their own names; the Loop stacks the scan outputs along a
new axis 0, reversed afterwards where their direction is reverse and moved
to their scan axis by a Transpose. Scans inside subgraphs and inside
function bodies (LinearAttention's) are rewritten too. Opset 8's Scan
(batched, with sequence lengths) is refused.
"""
from __future__ import annotations

import onnx
from onnx import helper

from ...runtime.errors import UnsupportedOnnxOp
from .functions import _copy, _value_types

_INT64_MAX = 2**63 - 1


def scans_as_loops(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """``model`` with every Scan node replaced by an equivalent Loop (and the
    nodes computing its trip count and arranging its outputs); ``model``
    itself when it has none."""
    if not _has_scan(model.graph):
        return model
    if opset < 9:
        raise UnsupportedOnnxOp("Scan at opset 8 (batched, with sequence_lens) is not supported; opset 9's is")
    model = _copy(model)
    ranks = {name: len(ty.tensor_type.shape.dim) for name, ty in _value_types(model).items()
             if ty.HasField("tensor_type") and ty.tensor_type.HasField("shape")}
    counter = iter(range(1 << 30))
    _rewrite_graph(model.graph, ranks, counter)
    return model


def _has_scan(graph) -> bool:
    return any(node.op_type == "Scan" and node.domain in ("", "ai.onnx")
               or any(_has_scan(g) for a in node.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs))
               for node in graph.node)


def _rewrite_graph(graph, ranks: dict, counter) -> None:
    nodes = []
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _rewrite_graph(sub, ranks, counter)
        if node.op_type == "Scan" and node.domain in ("", "ai.onnx"):
            nodes.extend(_as_loop(node, ranks, f"scan{next(counter)}"))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _rank(name: str, ranks: dict, what: str) -> int:
    if name not in ranks:
        raise UnsupportedOnnxOp(f"Scan: the rank of {what} '{name}' is unknown (needed for a negative axis or an "
                                "output axis other than 0)")
    return ranks[name]


def _as_loop(node, ranks: dict, tag: str) -> list:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    body = attrs["body"]
    scans = int(attrs["num_scan_inputs"])
    states = len(node.input) - scans
    outputs = len(body.output) - states
    if states < 0 or len(body.input) != states + scans:
        raise ValueError(f"Scan has {len(node.input)} inputs and {len(body.input)} body inputs for "
                         f"{scans} scan inputs")
    in_axes = list(attrs.get("scan_input_axes", [0] * scans))
    in_reverse = list(attrs.get("scan_input_directions", [0] * scans))
    out_axes = list(attrs.get("scan_output_axes", [0] * outputs))
    out_reverse = list(attrs.get("scan_output_directions", [0] * outputs))
    scan_inputs = list(node.input[states:])
    for j, name in enumerate(scan_inputs):
        if in_axes[j] < 0:
            in_axes[j] += _rank(name, ranks, "scan input")

    def name(what: str) -> str:
        return f"{tag}_{what}"

    outer = [helper.make_node("Shape", [scan_inputs[0]], [name("shape")]),
             helper.make_node("Constant", [], [name("axis")], value=helper.make_tensor("", onnx.TensorProto.INT64, [],
                                                                                        [in_axes[0]])),
             helper.make_node("Gather", [name("shape"), name("axis")], [name("trip")], axis=0),
             helper.make_node("Constant", [], [name("one")], value=helper.make_tensor("", onnx.TensorProto.INT64, [],
                                                                                       [1])),
             helper.make_node("Sub", [name("trip"), name("one")], [name("last")])]

    inner = [helper.make_node("Identity", [name("cond_in")], [name("cond_out")])]
    if any(in_reverse):
        inner.append(helper.make_node("Sub", [name("last"), name("i")], [name("back")]))
    for j, value in enumerate(body.input[states:]):
        index = name("back") if in_reverse[j] else name("i")
        inner.append(helper.make_node("Gather", [scan_inputs[j], index], [value.name], axis=in_axes[j]))
    inner.extend(body.node)
    carried_out = [name(f"state{k}") for k in range(states)] + [name(f"out{k}") for k in range(outputs)]
    inner.extend(helper.make_node("Identity", [value.name], [renamed])
                 for value, renamed in zip(body.output, carried_out))
    loop_body = helper.make_graph(
        inner, name("body"),
        [helper.make_tensor_value_info(name("i"), onnx.TensorProto.INT64, []),
         helper.make_tensor_value_info(name("cond_in"), onnx.TensorProto.BOOL, []),
         *body.input[:states]],
        [helper.make_tensor_value_info(name("cond_out"), onnx.TensorProto.BOOL, []),
         *[_renamed(v, n) for v, n in zip(body.output, carried_out)]],
        initializer=list(body.initializer))

    stacked = [name(f"stacked{k}") for k in range(outputs)]
    loop = helper.make_node("Loop", [name("trip"), "", *node.input[:states]],
                            [*node.output[:states], *stacked], body=loop_body)
    after = []
    for k, result in enumerate(node.output[states:]):
        source = stacked[k]
        if out_reverse[k]:
            after.extend(_reversed_along_0(source, name(f"reversed{k}"), name(f"rev{k}")))
            source = name(f"reversed{k}")
        axis = out_axes[k]
        if axis != 0:
            rank = _rank(body.output[states + k].name, ranks, "scan output") + 1
            axis = axis + rank if axis < 0 else axis
            perm = list(range(1, rank))
            perm.insert(axis, 0)
            after.append(helper.make_node("Transpose", [source], [result], perm=perm))
        else:
            after.append(helper.make_node("Identity", [source], [result]))
    return [*outer, loop, *after]


def _renamed(value: onnx.ValueInfoProto, name: str) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(value)
    copy.name = name
    return copy


def _reversed_along_0(source: str, result: str, tag: str) -> list:
    def const(suffix, value):
        return helper.make_node("Constant", [], [f"{tag}_{suffix}"],
                                value=helper.make_tensor("", onnx.TensorProto.INT64, [1], [value]))

    return [const("start", -1), const("end", -_INT64_MAX), const("axis", 0), const("step", -1),
            helper.make_node("Slice", [source, f"{tag}_start", f"{tag}_end", f"{tag}_axis", f"{tag}_step"],
                             [result])]
