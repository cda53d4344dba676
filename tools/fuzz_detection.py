"""Seed models for ``fuzz_importer`` taken from torchvision's detection exports
in ``tests/data`` (weights filled by ``materialize.py``, seed 0).

A whole detector takes 10-45 s to compile, and a mutant of one took 4 s on
average in the full run (most are refused by the checks before compiling;
docs/fuzzing.md), against 0.1 s for a mutant of a part: 5,000 whole-model
mutants would take over 5 hours and spend them mostly on the backbone. The
importer's hard cases sit in the data-dependent post-processing (NonZero,
TopK with a runtime K, GatherND, NMS inside an If, Reshape /
ConstantOfShape / Expand from runtime shapes), a few hundred nodes that
compile in about a second. So ``detection_seeds`` cuts those
parts out (``part``: every node from a starting node to the chosen outputs;
what they read from before the start becomes a graph input) and feeds them
what the whole model computes there for real images (onnxruntime on the
materialized model), so that mutants see realistic boxes, scores and
counts. ``whole_seeds`` are the two whole models, for a few mutants only.
"""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import helper

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"
SSD, FRCNN = "ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"
# Images (H, W) the parts' inputs are computed from.
IMAGES = ((320, 320), (256, 384))
# A part's input dimensions above this size are symbolic (counts of anchors,
# boxes, classes: one name per size, as equal sizes are equal in the model);
# smaller ones (box coordinates, the batch) are literals.
LARGEST_LITERAL = 4
# Besides the images' values, each part gets its inputs' first rows along
# the symbolic dimensions (where onnxruntime runs that): few and no boxes.
FEW_ROWS = (7, 0)

# name -> (model, first node's first output, outputs of the part)
PARTS = {
    # box decoding and clipping, softmax over the 91 classes
    "ssdlite-decode": (SSD, "/Split_output_0", ["/Reshape_output_0", "/Squeeze_1_output_0"]),
    # per class: score threshold (NonZero, GatherND), TopK of min(K, count), labels (ConstantOfShape)
    "ssdlite-select": (SSD, "/Gather_8_output_0",
                       ["/Gather_10_output_0", "/TopK_output_0", "/ConstantOfShape_output_0",
                        "/Gather_13_output_0", "/TopK_1_output_0", "/ConstantOfShape_1_output_0"]),
    # batched NMS (an If on an empty input), keep the best, rescale to the image
    "ssdlite-nms": (SSD, "onnx::ReduceProd_3823", ["boxes", "scores", "labels"]),
    # RPN: per-level TopK, decoding, small-box removal, NMS in an If
    "frcnn-rpn": (FRCNN, "/rpn/Unsqueeze_41_output_0", ["/rpn/Gather_57_output_0"]),
    # box head post-processing: softmax, decode, threshold, NMS in an If, top 100
    "frcnn-boxes": (FRCNN, "/roi_heads/Softmax_output_0", ["boxes", "labels", "scores"]),
}


def _materialized(name: str) -> onnx.ModelProto:
    from shapefn.bench.models import materialize

    return materialize(DATA, name)


def _images():
    rng = np.random.default_rng(1)
    return [rng.uniform(0, 1, (3, h, w)).astype(np.float32) for h, w in IMAGES]


def _free_names(graph) -> set[str]:
    """Names a subgraph reads from the enclosing scopes."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(_node_reads(node))
        defined.update(node.output)
    return used - defined


def _node_reads(node) -> set[str]:
    reads = {name for name in node.input if name}
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            reads |= _free_names(sub)
    return reads


def part(model: onnx.ModelProto, start: str, outputs: list[str]):
    """The nodes of ``model`` from the one whose first output is ``start``
    on that ``outputs`` depend on (with the Constant nodes they read from
    anywhere); returns ``(nodes, cut)``, ``cut`` the names read from before
    the start (to become inputs), in the order they are first read."""
    nodes = list(model.graph.node)
    first = next(i for i, n in enumerate(nodes) if n.output and n.output[0] == start)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    initializers = {t.name for t in model.graph.initializer}
    chosen, cut, todo = set(), [], list(outputs)
    while todo:
        name = todo.pop()
        i = producer.get(name)
        if i is None:
            if name not in initializers and name not in cut:
                cut.append(name)
            continue
        if i in chosen:
            continue
        if i < first and nodes[i].op_type != "Constant":
            if name not in cut:
                cut.append(name)
            continue
        chosen.add(i)
        todo.extend(sorted(_node_reads(nodes[i])))
    return [nodes[i] for i in sorted(chosen)], cut


def _intermediates(model: onnx.ModelProto, names: list[str], images) -> list[list[np.ndarray]]:
    """onnxruntime's values of ``names`` in ``model`` for each image."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [[np.asarray(v) for v in session.run(names, {"image": image})] for image in images]


def _symbolic(size: int) -> bool:
    return size > LARGEST_LITERAL


def _value_info(name: str, value: np.ndarray):
    """A graph input of ``value``'s dtype and shape, its large dimensions symbolic."""
    dims = [f"n{d}" if _symbolic(d) else d for d in value.shape]
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), dims)


def _first_rows(values: list[np.ndarray], rows: int) -> list[np.ndarray]:
    """``values`` cut to their first ``rows`` along every symbolic dimension."""
    return [v[tuple(slice(0, rows) if _symbolic(d) else slice(None) for d in v.shape)] for v in values]


def _runs(model: onnx.ModelProto, feed) -> bool:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, dict(zip([i.name for i in model.graph.input], feed)))
    except Exception:  # noqa: BLE001 - a feed onnxruntime refuses is left out
        return False
    return True


def detection_seeds(names=None) -> dict:
    """The parts of ``PARTS`` (all, or ``names``) as seed models: name ->
    (model, feeds), feeds from each image of ``IMAGES`` and ``FEW_ROWS``."""
    seeds, models = {}, {}
    for name in names or PARTS:
        source, start, outputs = PARTS[name]
        full = models.get(source) or models.setdefault(source, _materialized(source))
        nodes, cut = part(full, start, outputs)
        feeds = _intermediates(full, cut + outputs, _images())
        used = {n for node in nodes for n in _node_reads(node)}
        outs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[0][len(cut) + i].dtype), None)
                for i, n in enumerate(outputs)]
        feeds = [feed[:len(cut)] for feed in feeds]
        graph = helper.make_graph(nodes, name, [_value_info(n, v) for n, v in zip(cut, feeds[0])], outs,
                                  initializer=[t for t in full.graph.initializer if t.name in used])
        model = helper.make_model(graph, opset_imports=list(full.opset_import), ir_version=full.ir_version)
        few = [_first_rows(feeds[0], rows) for rows in FEW_ROWS]
        seeds[f"detection/{name}"] = (model, feeds + [feed for feed in few if _runs(model, feed)])
    return seeds


def whole_seeds() -> dict:
    """The two whole detectors, run on the images of ``IMAGES``."""
    feeds = [[image] for image in _images()]
    return {f"whole/{name}": (_materialized(name), feeds) for name in (SSD, FRCNN)}
