"""An ONNX test model with its nodes moved into control-flow bodies.

``in_bodies(model)`` returns a model that computes ``model``'s outputs
twice: once inside a one-iteration ``Loop`` whose body receives the graph's
inputs as carried values (so inside it they are the loop function's
parameters, with sizes of their own, not the caller's), and once inside the
``then`` branch of an ``If`` on a run-time condition (its branches read the
inputs as captured outer values). Initializers stay in the outer graph,
read from the bodies as captured constants. The result's outputs are
``model``'s outputs from the Loop, then from the If; its inputs are
``model``'s and a scalar bool ``take`` (feed True).

ONNX's backend tests and the converter tests run their graphs at the top
level; real exporters put any operator inside a body (tf2onnx's Loop over a
batch, an autoregressive decoder's Loop): onnx_check's ``bodies`` variant
(tests/conftest.py) runs every converter test's model this way.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

TAKE = "bodies/take"


class NotWrappable(ValueError):
    """A model whose inputs or outputs cannot cross into a Loop body as
    tensors (sequences, optionals, maps)."""


def _tensor_type(value_info, what: str):
    if not value_info.type.HasField("tensor_type"):
        raise NotWrappable(f"{what} '{value_info.name}' is not a tensor")
    return value_info.type.tensor_type


def _defined_names(graph) -> set[str]:
    """Names a graph's nodes (and nested subgraphs, their inputs and
    initializers included) define."""
    names = set()
    for node in graph.node:
        names.update(o for o in node.output if o)
        for sub in _subgraphs(node):
            names.update(i.name for i in sub.input)
            names.update(t.name for t in sub.initializer)
            names |= _defined_names(sub)
    return names


def _subgraphs(node):
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _rename_graph(graph, names: dict[str, str]) -> None:
    """Renames, in place, every name of ``graph`` found in ``names``."""
    for info in list(graph.input) + list(graph.output) + list(graph.value_info):
        info.name = names.get(info.name, info.name)
    for init in graph.initializer:
        init.name = names.get(init.name, init.name)
    for node in graph.node:
        _rename_node(node, names)


def _rename_node(node, names: dict[str, str]) -> None:
    node.input[:] = [names.get(n, n) for n in node.input]
    node.output[:] = [names.get(n, n) for n in node.output]
    if node.name:
        node.name = names.get(node.name, node.name)
    for sub in _subgraphs(node):
        _rename_graph(sub, names)


def _copied_nodes(graph, prefix: str, inputs: dict[str, str]) -> list:
    """``graph``'s nodes with every name they define prefixed and the graph
    inputs renamed as ``inputs`` says."""
    # (Not the initializers' names, which the bodies read from the outer
    # graph: a nested subgraph may define one of them again, shadowing it.)
    kept = {t.name for t in graph.initializer}
    names = {n: prefix + n for n in _defined_names(graph) - kept}
    names.update(inputs)
    nodes = []
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        _rename_node(copy, names)
        if copy.name:
            copy.name = prefix + node.name
        nodes.append(copy)
    return nodes, names


def _carried_info(name: str, outer):
    """The body's parameter for the graph input ``outer``: its element type
    and rank, its static sizes, and unknown sizes where ``outer`` names
    symbolic ones (the body's own, not the caller's)."""
    info = onnx.ValueInfoProto()
    info.CopyFrom(outer)
    info.name = name
    for dim in info.type.tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            dim.Clear()
    return info


def _out_info(name: str, elem_type: int):
    return helper.make_tensor_value_info(name, elem_type, None)


def _opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def in_bodies(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s graph run inside a Loop body and inside an If branch
    (the module's docstring). Raises NotWrappable for a model whose inputs
    or outputs are not tensors."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    for i in inputs:
        _tensor_type(i, "input")  # (raises NotWrappable for a sequence or an optional)
    out_types = [_tensor_type(o, "output").elem_type for o in graph.output]
    if _opset(model) < 11:
        raise NotWrappable("the model's opset is older than 11")

    # Loop(1, true, *inputs): body(i, cond, *inputs) -> (cond, *inputs, *outputs as scans)
    carried = {i.name: f"loop/{i.name}" for i in inputs}
    nodes, names = _copied_nodes(graph, "loop/", carried)
    body_outputs = [_out_info("bodies/cond_out", TensorProto.BOOL)]
    nodes.append(helper.make_node("Identity", ["bodies/cond"], ["bodies/cond_out"]))
    for k, i in enumerate(inputs):
        nodes.append(helper.make_node("Identity", [carried[i.name]], [f"bodies/next{k}"]))
        body_outputs.append(_carried_info(f"bodies/next{k}", i))
    for k, (o, elem) in enumerate(zip(graph.output, out_types)):
        nodes.append(helper.make_node("Identity", [names.get(o.name, o.name)], [f"bodies/loop_out{k}"]))
        body_outputs.append(_out_info(f"bodies/loop_out{k}", elem))
    body_inputs = [helper.make_tensor_value_info("bodies/i", TensorProto.INT64, []),
                   helper.make_tensor_value_info("bodies/cond", TensorProto.BOOL, [])]
    body_inputs += [_carried_info(carried[i.name], i) for i in inputs]
    body = helper.make_graph(nodes, "loop_body", body_inputs, body_outputs)
    scans = [f"bodies/scan{k}" for k in range(len(graph.output))]
    outer = [helper.make_node("Loop", ["bodies/trip", "bodies/go"] + [i.name for i in inputs],
                              [f"bodies/last{k}" for k in range(len(inputs))] + scans, body=body)]
    extra_inits = [helper.make_tensor("bodies/trip", TensorProto.INT64, [], [1]),
                   helper.make_tensor("bodies/go", TensorProto.BOOL, [], [True])]
    loop_outputs = [f"loop:{o.name}" for o in graph.output]
    if _opset(model) >= 13:
        extra_inits.append(helper.make_tensor("bodies/axis0", TensorProto.INT64, [1], [0]))
        outer += [helper.make_node("Squeeze", [s, "bodies/axis0"], [o]) for s, o in zip(scans, loop_outputs)]
    else:
        outer += [helper.make_node("Squeeze", [s], [o], axes=[0]) for s, o in zip(scans, loop_outputs)]

    # If(take): both branches are the graph (the else branch's answer is never taken)
    branches = {}
    for side in ("then", "else"):
        nodes, names = _copied_nodes(graph, f"{side}/", {})
        outs = []
        for k, (o, elem) in enumerate(zip(graph.output, out_types)):
            nodes.append(helper.make_node("Identity", [names.get(o.name, o.name)], [f"bodies/{side}_out{k}"]))
            outs.append(_out_info(f"bodies/{side}_out{k}", elem))
        branches[side] = helper.make_graph(nodes, f"{side}_branch", [], outs)
    if_outputs = [f"if:{o.name}" for o in graph.output]
    outer.append(helper.make_node("If", [TAKE], if_outputs, then_branch=branches["then"],
                                  else_branch=branches["else"]))

    wrapped = helper.make_graph(
        outer, f"{graph.name}_in_bodies",
        list(graph.input) + [helper.make_tensor_value_info(TAKE, TensorProto.BOOL, [])],
        [_out_info(n, elem) for n, elem in zip(loop_outputs + if_outputs, out_types + out_types)],
        initializer=list(graph.initializer) + extra_inits)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    result.graph.CopyFrom(wrapped)
    return result
